// Collectives on device buffers, without a GPU: a fake device (fake_device.hpp) whose memory
// faults on any direct access. Every collective must stage its transfers through pinned slots,
// reduce through the device, and give exactly the results of the host path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <tuple>

#include "check_data.hpp"
#include "communicator/runtime.hpp"
#include "core/dtype.hpp"
#include "fake_device.hpp"
#include "world.hpp"

namespace holmes::test {
namespace {

// The device under test: the fake by default; with HOLMES_TEST_REAL_CUDA=1 (bench/gpu-check.sh
// on a GPU machine) the real CUDA device, which must then exist.
DeviceMemory* device = nullptr;
FakeDeviceMemory* fake = nullptr;  // set only when the fake is in use

class FakeDeviceEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (std::getenv("HOLMES_TEST_REAL_CUDA") != nullptr) {
      DeviceMemory* cuda = detail::Runtime::get().device_memory();
      ASSERT_NE(cuda, nullptr) << "HOLMES_TEST_REAL_CUDA is set but no CUDA device is usable";
      // Collectives find the device from the buffers; allocate on the rank's GPU.
      device = cuda;
      return;
    }
    auto owned = std::make_unique<FakeDeviceMemory>();
    fake = owned.get();
    device = fake;
    detail::Runtime::get().set_device_memory_for_testing(std::move(owned));
  }
  // The fake stays installed until the process ends: the world communicator still holds device
  // scratch it allocated, and frees it only when main() destroys the world after the tests.
  void TearDown() override {}
};
[[maybe_unused]] ::testing::Environment* const kEnvironment =
    ::testing::AddGlobalTestEnvironment(new FakeDeviceEnvironment);

struct DeviceBuffer {
  std::shared_ptr<std::byte> memory;
  std::size_t bytes = 0;
  std::byte* get() const { return memory.get(); }
};

DeviceBuffer upload(const std::vector<std::byte>& host) {
  DeviceBuffer d{device->allocate(std::max<std::size_t>(host.size(), 1)), host.size()};
  if (!host.empty()) device->from_host(d.get(), host.data(), host.size());
  return d;
}

std::vector<std::byte> download(const DeviceBuffer& d) {
  std::vector<std::byte> host(d.bytes);
  if (d.bytes > 0) device->to_host(host.data(), d.get(), d.bytes);
  return host;
}

std::size_t reductions_so_far() { return fake != nullptr ? fake->device_reductions() : 0; }

enum class Coll { kAllreduce, kReduceScatter, kAllgather, kBroadcast, kReduce, kAlltoall };
const char* coll_name(Coll c) {
  switch (c) {
    case Coll::kAllreduce:
      return "allreduce";
    case Coll::kReduceScatter:
      return "reduce_scatter";
    case Coll::kAllgather:
      return "allgather";
    case Coll::kBroadcast:
      return "broadcast";
    case Coll::kReduce:
      return "reduce";
    case Coll::kAlltoall:
      return "alltoall";
  }
  return "?";
}

using DeviceParam = std::tuple<Coll, hm_dtype_t, hm_op_t, std::size_t, bool>;

class DeviceCollectiveTest : public ::testing::TestWithParam<DeviceParam> {};

std::string device_test_name(const ::testing::TestParamInfo<DeviceParam>& info) {
  const auto [coll, dtype, op, count, in_place] = info.param;
  return std::string(coll_name(coll)) + "_" + dtype_name(dtype) + "_" + op_name(op) + "_" +
         std::to_string(count) + (in_place ? "_InPlace" : "_OutOfPlace");
}

TEST_P(DeviceCollectiveTest, MatchesTheExactResult) {
  const auto [coll, dtype, op, count, in_place] = GetParam();
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  const auto nn = static_cast<std::size_t>(n);
  const std::size_t es = dtype_size(dtype);
  const unsigned salt = salt_of(static_cast<int>(coll), dtype, op, static_cast<int>(count % 97));
  const std::size_t reductions_before = reductions_so_far();
  std::vector<std::byte> expected;
  std::vector<std::byte> got;
  switch (coll) {
    case Coll::kAllreduce: {
      std::vector<std::byte> input(count * es);
      check::fill_input(input.data(), dtype, op, r, 0, count, salt);
      auto send = upload(input);
      auto recv = in_place ? send : upload(std::vector<std::byte>(count * es));
      comm.allreduce(send.get(), recv.get(), count, dtype, op);
      got = download(recv);
      expected.resize(count * es);
      check::fill_expected(expected.data(), dtype, op, n, 0, count, salt);
      break;
    }
    case Coll::kReduceScatter: {
      std::vector<std::byte> input(nn * count * es);
      check::fill_input(input.data(), dtype, op, r, 0, nn * count, salt);
      auto send = upload(input);
      if (in_place) {
        std::byte* mine = send.get() + static_cast<std::size_t>(r) * count * es;
        comm.reduce_scatter(send.get(), mine, count, dtype, op);
        const auto all = download(send);
        got.assign(all.begin() + static_cast<std::ptrdiff_t>(r * count * es),
                   all.begin() + static_cast<std::ptrdiff_t>((r + 1) * count * es));
      } else {
        auto recv = upload(std::vector<std::byte>(count * es));
        comm.reduce_scatter(send.get(), recv.get(), count, dtype, op);
        got = download(recv);
      }
      expected.resize(count * es);
      check::fill_expected(expected.data(), dtype, op, n, static_cast<std::size_t>(r) * count,
                           count, salt);
      break;
    }
    case Coll::kAllgather: {
      std::vector<std::byte> block(count * es);
      check::fill_input(block.data(), dtype, HM_SUM, r, static_cast<std::size_t>(r) * count, count,
                        salt);
      auto recv = upload(std::vector<std::byte>(nn * count * es));
      if (in_place) {
        std::byte* own = recv.get() + static_cast<std::size_t>(r) * count * es;
        if (count > 0) device->from_host(own, block.data(), block.size());
        comm.allgather(own, recv.get(), count, dtype);
      } else {
        auto send = upload(block);
        comm.allgather(send.get(), recv.get(), count, dtype);
      }
      got = download(recv);
      expected.resize(nn * count * es);
      for (int j = 0; j < n; ++j) {
        check::fill_input(expected.data() + static_cast<std::size_t>(j) * count * es, dtype, HM_SUM,
                          j, static_cast<std::size_t>(j) * count, count, salt);
      }
      break;
    }
    case Coll::kBroadcast: {
      const int root = in_place ? n - 1 : 0;
      expected.resize(count * es);
      check::fill_input(expected.data(), dtype, HM_SUM, root, 0, count, salt);
      auto buffer = upload(r == root ? expected : std::vector<std::byte>(count * es));
      comm.broadcast(buffer.get(), count, dtype, root);
      got = download(buffer);
      break;
    }
    case Coll::kReduce: {
      const int root = n - 1;
      std::vector<std::byte> input(count * es);
      check::fill_input(input.data(), dtype, op, r, 0, count, salt);
      auto send = upload(input);
      auto recv = in_place ? send : upload(std::vector<std::byte>(count * es));
      comm.reduce(send.get(), recv.get(), count, dtype, op, root);
      if (r != root) return;
      got = download(recv);
      expected.resize(count * es);
      check::fill_expected(expected.data(), dtype, op, n, 0, count, salt);
      break;
    }
    case Coll::kAlltoall: {
      std::vector<std::byte> input(nn * count * es);
      check::fill_input(input.data(), dtype, HM_SUM, r, 0, nn * count, salt);
      auto send = upload(input);
      auto recv = in_place ? send : upload(std::vector<std::byte>(nn * count * es));
      comm.alltoall(send.get(), recv.get(), count, dtype);
      got = download(recv);
      expected.resize(nn * count * es);
      for (int i = 0; i < n; ++i) {
        check::fill_input(expected.data() + static_cast<std::size_t>(i) * count * es, dtype, HM_SUM,
                          i, static_cast<std::size_t>(r) * count, count, salt);
      }
      break;
    }
  }
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_EQ(check::count_wrong(got.data(), expected.data(), got.size() / es, dtype), 0u);
  if (fake != nullptr && n > 1 && count > 0) {
    if (coll == Coll::kReduce) {
      // Only the root gets here, and it always reduces what it receives.
      EXPECT_GT(reductions_so_far(), reductions_before) << "reduced outside the device";
    } else if (coll == Coll::kAllreduce || coll == Coll::kReduceScatter) {
      // Some algorithms leave ranks without a reduction (the ranks folded out of recursive
      // doubling, positions past the last shard): the job as a whole must have reduced on the
      // device. Every rank gets here, so none waits for another in this sum.
      std::uint64_t mine = reductions_so_far() - reductions_before;
      std::uint64_t all = 0;
      comm.allreduce(&mine, &all, 1, HM_UINT64, HM_SUM);
      EXPECT_GT(all, 0u) << "reduced outside the device";
    }
  }
}

// The matrix: every collective x dtype x op x count x placement, with two cuts. The collectives
// that move data without reducing run with HM_SUM only (they ignore the op). And the large count
// (4 to 8 MiB, several staging slots) follows world.hpp's large_case_runs: in `make test` each
// dtype once per collective, the op and the placement rotating with it; with HOLMES_TEST_MATRIX=
// full (make test-long) every combination.
constexpr Coll kDeviceColls[] = {Coll::kAllreduce, Coll::kReduceScatter, Coll::kAllgather,
                                 Coll::kBroadcast, Coll::kReduce,        Coll::kAlltoall};
constexpr hm_dtype_t kDeviceDtypes[] = {HM_INT32, HM_FLOAT16, HM_BFLOAT16, HM_FLOAT32, HM_FLOAT64};
constexpr hm_op_t kDeviceOps[] = {HM_SUM, HM_AVG, HM_MAX};
constexpr std::size_t kDeviceCounts[] = {0, 1, 7, 99991};
constexpr std::size_t kDeviceLargeCount = std::size_t{1} << 20;

std::vector<DeviceParam> device_matrix() {
  std::vector<DeviceParam> params;
  for (const Coll coll : kDeviceColls) {
    const bool reduces =
        coll == Coll::kAllreduce || coll == Coll::kReduceScatter || coll == Coll::kReduce;
    const std::size_t ops = reduces ? std::size(kDeviceOps) : 1;
    for (std::size_t d = 0; d < std::size(kDeviceDtypes); ++d) {
      for (std::size_t o = 0; o < ops; ++o) {
        for (const bool in_place : {false, true}) {
          for (const std::size_t count : kDeviceCounts) {
            params.emplace_back(coll, kDeviceDtypes[d], kDeviceOps[o], count, in_place);
          }
          if (large_case_runs(d, o, ops, in_place ? 1 : 0, 2)) {
            params.emplace_back(coll, kDeviceDtypes[d], kDeviceOps[o], kDeviceLargeCount, in_place);
          }
        }
      }
    }
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(Fake, DeviceCollectiveTest, ::testing::ValuesIn(device_matrix()),
                         device_test_name);

TEST(DevicePointToPoint, SendAndReceiveDeviceBuffers) {
  auto& comm = world();
  const int n = comm.size();
  if (n == 1) return;
  const int r = comm.rank();
  constexpr std::size_t kCount = 300001;
  std::vector<float> mine(kCount, static_cast<float>(r + 1));
  auto send = upload(std::vector<std::byte>(reinterpret_cast<std::byte*>(mine.data()),
                                            reinterpret_cast<std::byte*>(mine.data() + kCount)));
  auto recv = upload(std::vector<std::byte>(kCount * sizeof(float)));
  auto got = comm.irecv(recv.get(), kCount, HM_FLOAT32, (r + n - 1) % n);
  auto sent = comm.isend(send.get(), kCount, HM_FLOAT32, (r + 1) % n);
  sent.wait();
  got.wait();
  const auto bytes = download(recv);
  std::vector<float> values(kCount);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  const float from = static_cast<float>((r + n - 1) % n + 1);
  EXPECT_EQ(values.front(), from);
  EXPECT_EQ(values.back(), from);
  EXPECT_EQ(std::count(values.begin(), values.end(), from), static_cast<long>(kCount));
}

// Inside one host the ipc engine moves device buffers device to device: the ranks map each
// other's windows (the fake: memfd windows opened through /proc/<pid>/fd, as CUDA IPC maps a
// peer's allocation), so an allreduce, reduce-scatter or allgather makes no copy through host
// memory and reads the peers' memory directly; so does a broadcast. (The per-peer report is each
// rank's own view, so it says ipc even where another member cannot share.)
TEST(SameHostDevicePath, NoHostCopyAndPeersReadDirectly) {
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  if (fake == nullptr) GTEST_SKIP() << "counts the fake device's copies (a real device runs)";
  if (n == 1) GTEST_SKIP() << "one rank moves nothing";
  for (int peer = 0; peer < n; ++peer) {
    const std::string engine = comm.peer_transport(peer).engine;
    if (peer != r && engine != "ipc") {
      GTEST_SKIP() << "peer " << peer << " is reached through " << engine << ", not ipc";
    }
  }
  // Odd, so the blocks are uneven.
  constexpr std::size_t kCount = 300007;
  const auto nn = static_cast<std::size_t>(n);
  auto value = [](int rank, std::size_t i) {
    return static_cast<float>((rank + 1) * static_cast<int>(i % 13 + 1));
  };
  auto as_bytes = [](const std::vector<float>& v) {
    const auto* b = reinterpret_cast<const std::byte*>(v.data());
    return std::vector<std::byte>(b, b + v.size() * sizeof(float));
  };
  auto as_floats = [](const DeviceBuffer& d) {
    const auto bytes = download(d);
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  };
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  // With HOLMES_TEST_UNSHARED_RANK one rank's fake device refuses to share its memory: the
  // group agrees to stage on the ring instead, every member, and the results stay exact.
  const bool shared = std::getenv("HOLMES_TEST_UNSHARED_RANK") == nullptr;
  // Runs `call` and checks that it copied nothing through host memory and read the peers' (or,
  // where one rank cannot share, the other way round).
  auto device_to_device = [&](const char* what, auto call, bool reads_peers = true) {
    const std::size_t copies = fake->host_copies();
    const std::size_t peers = fake->peer_accesses();
    call();
    if (shared) {
      EXPECT_EQ(fake->host_copies(), copies) << what << " copied through host memory";
      if (reads_peers) {
        EXPECT_GT(fake->peer_accesses(), peers) << what << " read no peer's memory";
      }
    } else {
      EXPECT_GT(fake->host_copies(), copies) << what << " was not staged";
      EXPECT_EQ(fake->peer_accesses(), peers) << what << " read a peer's memory";
    }
  };

  std::vector<float> input(nn * kCount);
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = value(r, i);
  auto send = upload(as_bytes(input));
  auto recv = upload(std::vector<std::byte>(nn * kCount * sizeof(float)));

  device_to_device("allreduce",
                   [&] { comm.allreduce(send.get(), recv.get(), kCount, HM_FLOAT32, HM_SUM); });
  auto got = as_floats(recv);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kCount; ++i) wrong += got[i] != ranks_sum * value(0, i);
  EXPECT_EQ(wrong, 0u) << "allreduce";

  device_to_device("reduce_scatter", [&] {
    comm.reduce_scatter(send.get(), recv.get(), kCount, HM_FLOAT32, HM_SUM);
  });
  got = as_floats(recv);
  wrong = 0;
  for (std::size_t i = 0; i < kCount; ++i) {
    wrong += got[i] != ranks_sum * value(0, static_cast<std::size_t>(r) * kCount + i);
  }
  EXPECT_EQ(wrong, 0u) << "reduce_scatter";

  device_to_device("allgather",
                   [&] { comm.allgather(send.get(), recv.get(), kCount, HM_FLOAT32); });
  got = as_floats(recv);
  wrong = 0;
  for (std::size_t j = 0; j < nn; ++j) {
    for (std::size_t i = 0; i < kCount; ++i) {
      wrong += got[j * kCount + i] != value(static_cast<int>(j), i);
    }
  }
  EXPECT_EQ(wrong, 0u) << "allgather";

  // Broadcast from the last rank: the others read its window (the root only fills its own).
  const int root = n - 1;
  device_to_device(
      "broadcast", [&] { comm.broadcast(send.get(), kCount, HM_FLOAT32, root); }, r != root);
  got = as_floats(send);
  wrong = 0;
  for (std::size_t i = 0; i < kCount; ++i) wrong += got[i] != value(root, i);
  EXPECT_EQ(wrong, 0u) << "broadcast";
}

TEST(DeviceArguments, MixedHostAndDeviceBuffersAreRefused) {
  auto& comm = world();
  auto device = upload(std::vector<std::byte>(64));
  std::vector<float> host(16);
  try {
    comm.allreduce(device.get(), host.data(), 16, HM_FLOAT32, HM_SUM);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("sendbuf is device memory but recvbuf is host memory"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace holmes::test
