// Collectives ordered on a stream (hm_comm_set_cuda_stream), without a GPU: the fake device's
// FakeStream stands in for a CUDA stream, so the host proxy's ordering is checked exactly: a call
// returns while the work before it is still pending, starts only once that work has finished, and
// holds the work after it until it is over. The stream's tasks play the trainer's kernels.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include "communicator/runtime.hpp"
#include "fake_device.hpp"
#include "world.hpp"

namespace holmes::test {
namespace {

using namespace std::chrono_literals;

constexpr auto kSyncTimeout = std::chrono::milliseconds(120'000);

// The fake device the test environment installed; nullptr with HOLMES_TEST_REAL_CUDA=1.
FakeDeviceMemory* fake_device() {
  return dynamic_cast<FakeDeviceMemory*>(detail::Runtime::get().device_memory());
}

#define REQUIRE_FAKE_DEVICE()                                                                \
  FakeDeviceMemory* const device = fake_device();                                            \
  if (device == nullptr) {                                                                   \
    GTEST_SKIP() << "the stream ordering checks drive the fake device's streams; on a GPU, " \
                    "bench/gpu-check.sh checks real streams";                                \
  }

// This rank's partner in the pairs 0-1, 2-3, ... of world(); with an odd count the last rank
// sits the test out.
#define REQUIRE_PARTNER(rank)                               \
  const int partner = (rank) ^ 1;                           \
  if (partner >= world().size()) {                          \
    GTEST_SKIP() << "rank " << (rank) << " has no partner"; \
  }                                                         \
  const bool sender = (rank) % 2 == 0

// Device floats, read and written by tasks on the stream (the trainer's kernels).
struct DeviceFloats {
  DeviceFloats(FakeDeviceMemory& device, std::size_t count)
      : device(&device), count(count), memory(device.allocate(count * sizeof(float))) {}
  float* get() const { return reinterpret_cast<float*>(memory.get()); }
  void write(const std::vector<float>& values) const {
    device->from_host(get(), values.data(), values.size() * sizeof(float));
  }
  std::vector<float> read() const {
    std::vector<float> values(count);
    device->to_host(values.data(), get(), count * sizeof(float));
    return values;
  }
  FakeDeviceMemory* device;
  std::size_t count;
  std::shared_ptr<std::byte> memory;
};

std::vector<float> input_of(int rank, std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>((rank + 1) * (i % 101 + 1));
  return v;
}

// Elements of `got` unlike `expected` (all of them where the sizes differ).
std::size_t unlike(const std::vector<float>& got, const std::vector<float>& expected) {
  if (got.size() != expected.size()) return expected.size();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != expected[i] ? 1 : 0;
  return wrong;
}

// Every rank's input_of, summed element by element.
std::vector<float> sum_of_inputs(int ranks, std::size_t count) {
  std::vector<float> total(count, 0.0F);
  for (int j = 0; j < ranks; ++j) {
    const auto input = input_of(j, count);
    for (std::size_t i = 0; i < count; ++i) total[i] += input[i];
  }
  return total;
}

// The kernel that writes a call's input: a task on the stream that writes input_of(rank) into
// `x` once release() is called, so that the call is made while the work before it is pending.
class HeldInput {
 public:
  HeldInput(FakeStream& stream, const DeviceFloats& x, int rank) {
    stream.enqueue([state = state_, &x, rank, released = state_->release.get_future().share()] {
      released.wait_for(kSyncTimeout);
      x.write(input_of(rank, x.count));
      state->written = true;
    });
  }
  void release() { state_->release.set_value(); }
  bool written() const { return state_->written.load(); }

 private:
  struct State {
    std::promise<void> release;
    std::atomic<bool> written{false};
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

class StreamOrder : public ::testing::TestWithParam<std::size_t> {};

// stream: [gate closed until the test opens it; write x = input] -> allreduce(x) in place
// -> [x += rank] -> allreduce(x) in place -> [read x]. Each allreduce must wait for the task
// before it and hold the task after it; the result says whether both happened.
TEST_P(StreamOrder, AllreduceWaitsForEarlierWorkAndHoldsLaterWork) {
  REQUIRE_FAKE_DEVICE();
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  const std::size_t count = GetParam();
  FakeStream stream;
  DeviceFloats x(*device, count);
  HeldInput input(stream, x, r);
  comm.set_cuda_stream(&stream);
  comm.allreduce(x.get(), x.get(), count, HM_FLOAT32, HM_SUM);
  // The call returned while the work before it is still held: it was only enqueued.
  EXPECT_FALSE(input.written());
  stream.enqueue([&] {
    auto v = x.read();
    for (auto& e : v) e += static_cast<float>(r);
    x.write(v);
  });
  comm.allreduce(x.get(), x.get(), count, HM_FLOAT32, HM_SUM);
  std::vector<float> got;
  stream.enqueue([&] { got = x.read(); });
  comm.clear_cuda_stream();
  input.release();
  EXPECT_TRUE(stream.synchronize(kSyncTimeout));
  EXPECT_EQ(comm.async_error(), HM_SUCCESS);
  // sum over ranks of (sum over ranks of input + rank) = n * sum(input) + sum(ranks).
  const float rank_sum = static_cast<float>(n * (n - 1) / 2);
  const std::vector<float> total = sum_of_inputs(n, count);
  std::size_t wrong = got.size() == count ? 0 : count;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != static_cast<float>(n) * total[i] + rank_sum) ++wrong;
  }
  EXPECT_EQ(wrong, 0u);
}

// Small (one chunk, the caller-driven path) and large (staged in many chunks).
INSTANTIATE_TEST_SUITE_P(Sizes, StreamOrder,
                         ::testing::Values(std::size_t{1000}, std::size_t{1} << 20));

// Every collective with buffers on the device, each on the stream, its input written by a task
// before it and its output read by a task after it.
TEST(StreamOrderKinds, EveryCollectiveRunsInStreamOrder) {
  REQUIRE_FAKE_DEVICE();
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  const auto nn = static_cast<std::size_t>(n);
  const std::size_t count = 4099;  // per block; odd, so blocks split unevenly into chunks
  FakeStream stream;
  DeviceFloats blocks(*device, nn * count);  // n blocks: reduce_scatter's, alltoall's input
  DeviceFloats one(*device, count);
  DeviceFloats gathered(*device, nn * count);
  std::vector<float> reduced_block, gathered_host, broadcast_host, reduced_root, exchanged;
  comm.set_cuda_stream(&stream);

  auto fill = [&](const DeviceFloats& d, int salt) {
    std::vector<float> v(d.count);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((r + 1) * salt + i % 7);
    d.write(v);
  };
  stream.enqueue([&] { fill(blocks, 3); });
  comm.reduce_scatter(blocks.get(), one.get(), count, HM_FLOAT32, HM_SUM);
  stream.enqueue([&] { reduced_block = one.read(); });
  stream.enqueue([&] { fill(one, 5); });
  comm.allgather(one.get(), gathered.get(), count, HM_FLOAT32);
  stream.enqueue([&] { gathered_host = gathered.read(); });
  stream.enqueue([&] { fill(one, 11); });
  comm.broadcast(one.get(), count, HM_FLOAT32, n - 1);
  stream.enqueue([&] { broadcast_host = one.read(); });
  stream.enqueue([&] { fill(one, 13); });
  comm.reduce(one.get(), gathered.get(), count, HM_FLOAT32, HM_MAX, 0);
  stream.enqueue([&] {
    if (r == 0) reduced_root = gathered.read();
    reduced_root.resize(r == 0 ? count : 0);  // the reduce wrote the first block only
  });
  stream.enqueue([&] { fill(blocks, 17); });
  comm.alltoall(blocks.get(), gathered.get(), count, HM_FLOAT32);
  stream.enqueue([&] { exchanged = gathered.read(); });
  comm.clear_cuda_stream();
  EXPECT_TRUE(stream.synchronize(kSyncTimeout));
  EXPECT_EQ(comm.async_error(), HM_SUCCESS);

  auto value = [](int rank, int salt, std::size_t i) {
    return static_cast<float>((rank + 1) * salt + i % 7);
  };
  // How many elements of each collective's result differ from the reference.
  auto expect = [&](const char* what, const std::vector<float>& got, std::size_t size,
                    auto reference) {
    std::size_t wrong = got.size() == size ? 0 : size;
    for (std::size_t i = 0; i < size && wrong < size; ++i) wrong += got[i] != reference(i) ? 1 : 0;
    EXPECT_EQ(wrong, 0u) << what << " on rank " << r << ": elements unlike the reference";
  };
  expect("reduce_scatter", reduced_block, count, [&](std::size_t i) {
    float s = 0;
    for (int j = 0; j < n; ++j) s += value(j, 3, static_cast<std::size_t>(r) * count + i);
    return s;
  });
  expect("allgather", gathered_host, nn * count,
         [&](std::size_t i) { return value(static_cast<int>(i / count), 5, i % count); });
  expect("broadcast", broadcast_host, count, [&](std::size_t i) { return value(n - 1, 11, i); });
  if (r == 0)
    expect("reduce", reduced_root, count, [&](std::size_t i) { return value(n - 1, 13, i); });
  // Block j of the result is rank j's block r.
  expect("alltoall", exchanged, nn * count, [&](std::size_t i) {
    return value(static_cast<int>(i / count), 17, static_cast<std::size_t>(r) * count + i % count);
  });
}

// A send and a receive on device buffers go on the stream too: the call returns while the work
// before it is held, the sender's data is what the stream wrote before the send, and the
// receiver's buffer is written after the work before the receive (which fills it with a
// sentinel) and before the work after it. Ranks pair up (0-1, 2-3, ...); with an odd count the
// last rank sits out.
TEST(StreamOrderKinds, SendAndReceiveRunInStreamOrder) {
  REQUIRE_FAKE_DEVICE();
  auto& comm = world();
  const int r = comm.rank();
  REQUIRE_PARTNER(r);
  const std::size_t count = 70001;
  FakeStream stream;
  DeviceFloats x(*device, count);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> first_ran{false};
  stream.enqueue([&, released] {
    released.wait_for(kSyncTimeout);
    if (sender) {
      x.write(input_of(r, count));
    } else {
      x.write(std::vector<float>(count, -1.0F));  // the sentinel the receive must overwrite
    }
    first_ran = true;
  });
  comm.set_cuda_stream(&stream);
  if (sender) {
    comm.send(x.get(), count, HM_FLOAT32, partner);
  } else {
    comm.recv(x.get(), count, HM_FLOAT32, partner);
  }
  EXPECT_FALSE(first_ran.load()) << "the call waited for the stream";
  // The work after the call: the sender overwrites its buffer (the send must have copied it out
  // already), the receiver reads what arrived.
  std::vector<float> got;
  stream.enqueue([&] {
    if (sender) {
      x.write(std::vector<float>(count, -2.0F));
    } else {
      got = x.read();
    }
  });
  comm.clear_cuda_stream();
  release.set_value();
  EXPECT_TRUE(stream.synchronize(kSyncTimeout));
  EXPECT_EQ(comm.async_error(), HM_SUCCESS);
  if (!sender) {
    EXPECT_EQ(unlike(got, input_of(partner, count)), 0u) << "elements unlike the partner's input";
  }
}

// A nonblocking collective on device buffers while a stream is set starts after the work
// enqueued on the stream before it (its input is written there, after the call returned), and
// leaves the stream free: the work after it runs without waiting for it. Every rank but 0 issues
// the call, then drains its stream, which could not happen were the stream held (the call cannot
// finish before rank 0 issues it), and only then tells rank 0 to issue its own.
TEST(StreamOrderKinds, NonblockingCallsStartAfterTheStreamAndLeaveItFree) {
  REQUIRE_FAKE_DEVICE();
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  const std::size_t count = 5003;
  FakeStream stream;
  DeviceFloats x(*device, count);
  DeviceFloats y(*device, count);
  HeldInput input(stream, x, r);
  comm.set_cuda_stream(&stream);
  std::int32_t token = 0;
  if (r == 0) {
    for (int j = 1; j < n; ++j) comm.recv(&token, 1, HM_INT32, j);  // host buffers: blocking
  }
  Request request = comm.iallreduce(x.get(), y.get(), count, HM_FLOAT32, HM_SUM);
  EXPECT_FALSE(input.written());
  EXPECT_FALSE(request.test()) << "done before the work before it on the stream";
  std::atomic<bool> later_ran{false};
  stream.enqueue([&] { later_ran = true; });
  if (r == 0) {
    // Every other rank has issued its call: one that did not wait for the stream would finish
    // in this time, on an input not yet written.
    std::this_thread::sleep_for(200ms);
    EXPECT_FALSE(request.test()) << "finished before the work before it on the stream";
  }
  input.release();
  if (r != 0) {
    EXPECT_TRUE(stream.synchronize(std::chrono::seconds(30))) << "the stream waited for the call";
    EXPECT_TRUE(later_ran.load());
    comm.send(&token, 1, HM_INT32, 0);
  }
  request.wait();
  comm.clear_cuda_stream();
  EXPECT_TRUE(stream.synchronize(kSyncTimeout));
  EXPECT_EQ(comm.async_error(), HM_SUCCESS);
  EXPECT_EQ(unlike(y.read(), sum_of_inputs(n, count)), 0u)
      << "elements unlike the sum of the inputs the stream wrote";
}

// Nonblocking sends and receives on device buffers while a stream is set move their data once
// the stream has reached the call, and hold no gate. The sender's input and the receiver's
// sentinel are written by a held task that, once released, waits 100 ms before it writes: a send
// that copied its buffer out at the call, or a receive that copied in before that work, would be
// caught. Ranks pair up (0-1, 2-3, ...); with an odd count the last rank sits out.
TEST(StreamOrderKinds, NonblockingSendAndReceiveWaitForTheStream) {
  REQUIRE_FAKE_DEVICE();
  auto& comm = world();
  const int r = comm.rank();
  REQUIRE_PARTNER(r);
  const std::size_t count = 70001;
  FakeStream stream;
  DeviceFloats x(*device, count);
  std::promise<void> release;
  stream.enqueue([&, released = release.get_future().share()] {
    released.wait_for(kSyncTimeout);
    std::this_thread::sleep_for(100ms);
    x.write(sender ? input_of(r, count) : std::vector<float>(count, -1.0F));
  });
  comm.set_cuda_stream(&stream);
  Request request = sender ? comm.isend(x.get(), count, HM_FLOAT32, partner)
                           : comm.irecv(x.get(), count, HM_FLOAT32, partner);
  std::atomic<bool> later_ran{false};
  stream.enqueue([&] { later_ran = true; });
  release.set_value();
  request.wait();
  EXPECT_TRUE(stream.synchronize(kSyncTimeout));
  EXPECT_TRUE(later_ran.load());
  comm.clear_cuda_stream();
  EXPECT_EQ(comm.async_error(), HM_SUCCESS);
  if (!sender) {
    EXPECT_EQ(unlike(x.read(), input_of(partner, count)), 0u)
        << "elements unlike the partner's input";
  }
}

// Request::wait_on_stream (hm_wait_on_stream): the stream, not the host, waits for a nonblocking
// collective. Rank 0 issues its call 200 ms after the others, so their stream's read of the
// result, enqueued right after the wait, would see the sentinel had the stream not waited.
TEST(StreamOrderKinds, TheStreamWaitsForANonblockingCollective) {
  REQUIRE_FAKE_DEVICE();
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  const std::size_t count = 30011;
  FakeStream stream;
  DeviceFloats x(*device, count);
  DeviceFloats y(*device, count);
  x.write(input_of(r, count));
  y.write(std::vector<float>(count, -1.0F));
  comm.set_cuda_stream(&stream);
  if (r == 0) std::this_thread::sleep_for(200ms);
  Request request = comm.iallreduce(x.get(), y.get(), count, HM_FLOAT32, HM_SUM);
  request.wait_on_stream();
  EXPECT_FALSE(request.valid()) << "the stream owns the wait";
  std::vector<float> got;
  stream.enqueue([&] { got = y.read(); });
  comm.clear_cuda_stream();
  EXPECT_TRUE(stream.synchronize(kSyncTimeout));
  EXPECT_EQ(comm.async_error(), HM_SUCCESS);
  EXPECT_EQ(unlike(got, sum_of_inputs(n, count)), 0u)
      << "the stream read the result before the collective was over";
}

// The same for receives: the receiver's stream reads the buffer right after the wait, and the
// sender sends 200 ms later; the data must be there when the stream reads, and an any-source
// receive's sender named.
TEST(StreamOrderKinds, TheStreamWaitsForAReceive) {
  REQUIRE_FAKE_DEVICE();
  auto& comm = world();
  const int r = comm.rank();
  REQUIRE_PARTNER(r);
  const std::size_t count = 70001;
  if (sender) {
    std::this_thread::sleep_for(200ms);
    const auto first = input_of(r, count);
    const auto second = input_of(r + 7, count);
    comm.send(first.data(), count, HM_FLOAT32, partner);
    comm.send(second.data(), count, HM_FLOAT32, partner);
    return;
  }
  FakeStream stream;
  DeviceFloats x(*device, count);
  DeviceFloats y(*device, count);
  x.write(std::vector<float>(count, -1.0F));
  y.write(std::vector<float>(count, -1.0F));
  comm.set_cuda_stream(&stream);
  comm.irecv(x.get(), count, HM_FLOAT32, partner).wait_on_stream();
  std::vector<float> first;
  stream.enqueue([&] { first = x.read(); });
  int source = -5;
  comm.irecv(y.get(), count, HM_FLOAT32, HM_ANY_SOURCE).wait_on_stream(&source);
  std::vector<float> second;
  int source_seen = -5;
  stream.enqueue([&] {
    second = y.read();
    source_seen = source;
  });
  comm.clear_cuda_stream();
  EXPECT_TRUE(stream.synchronize(kSyncTimeout));
  EXPECT_EQ(comm.async_error(), HM_SUCCESS);
  EXPECT_EQ(unlike(first, input_of(partner, count)), 0u) << "read before the receive was over";
  EXPECT_EQ(unlike(second, input_of(partner + 7, count)), 0u) << "read before the receive";
  EXPECT_EQ(source_seen, partner);
}

// Without a stream the wait is refused and the request stays the caller's.
TEST(StreamOrderKinds, WaitOnStreamNeedsAStream) {
  auto& comm = world();
  Request request = comm.ibarrier();
  try {
    request.wait_on_stream();
    ADD_FAILURE() << "waited on a stream the communicator does not have";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
  }
  ASSERT_TRUE(request.valid());
  request.wait();
}

// Host buffers keep blocking semantics while a stream is set, and run after the calls queued on
// the stream (every rank issues them in the same order).
TEST(StreamOrderKinds, HostBuffersStillBlock) {
  REQUIRE_FAKE_DEVICE();
  auto& comm = world();
  const int n = comm.size();
  FakeStream stream;
  DeviceFloats x(*device, 256);
  stream.enqueue([&] { x.write(input_of(comm.rank(), 256)); });
  comm.set_cuda_stream(&stream);
  comm.allreduce(x.get(), x.get(), 256, HM_FLOAT32, HM_SUM);
  std::vector<double> host(77, comm.rank() + 1.0);
  comm.allreduce(host.data(), host.data(), host.size(), HM_FLOAT64, HM_SUM);
  comm.clear_cuda_stream();
  EXPECT_TRUE(stream.synchronize(kSyncTimeout));
  const double expected = n * (n + 1) / 2.0;
  for (double v : host) EXPECT_EQ(v, expected);
  // Cleared: a device call blocks again, so its result is there when it returns.
  comm.allreduce(x.get(), x.get(), 256, HM_FLOAT32, HM_SUM);
  const auto got = x.read();
  float total = 0;
  for (int j = 0; j < n; ++j) total += input_of(j, 256)[5];
  EXPECT_EQ(got[5], static_cast<float>(n) * total);
}

// A communicator aborted while its call waits for the stream opens the gate: the stream goes on
// (the trainer's GPU does not hang) and the failure shows as the async error.
TEST(StreamOrderKinds, AbortReleasesTheStream) {
  REQUIRE_FAKE_DEVICE();
  auto sub = world().split(0, world().rank());
  FakeStream stream;
  DeviceFloats x(*device, 64);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  stream.enqueue([released] { released.wait_for(kSyncTimeout); });
  sub.set_cuda_stream(&stream);
  sub.allreduce(x.get(), x.get(), 64, HM_FLOAT32, HM_SUM);
  bool later_ran = false;
  stream.enqueue([&] { later_ran = true; });
  sub.abort();
  release.set_value();
  EXPECT_TRUE(stream.synchronize(kSyncTimeout));
  EXPECT_TRUE(later_ran);
  EXPECT_EQ(sub.async_error(), HM_ERR_ABORTED);
}

}  // namespace
}  // namespace holmes::test
