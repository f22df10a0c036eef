// memory.hpp on a GPU: memory kinds of CUDA allocations, copies, and the device kernels held to
// the CPU kernels bit for bit (every dtype x op x count, aligned and not, in place, with a
// page-locked host operand, from several threads at once). Every test here needs a device and
// skips without one (fails instead under HOLMES_REQUIRE_CUDA_DEVICE=1, as bench/gpu-check.sh
// runs them).
#include <gtest/gtest.h>
#include <holmes/error.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/memory.hpp"
#include "core/dtype.hpp"
#include "core/reduce.hpp"
#include "cuda_test_support.hpp"

#if defined(HOLMES_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace holmes {
namespace {

using testing::Bytes;

std::uint8_t* bytes_of(const DeviceBuffer& buffer) {
  return static_cast<std::uint8_t*>(buffer.data());
}

Bytes download(const void* device, std::size_t bytes) {
  Bytes out(bytes);
  copy_device_to_host(out.data(), device, bytes);
  return out;
}

template <typename Fn>
std::string error_of(Fn&& fn, hm_status_t status) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no holmes::Error thrown";
  return "";
}

TEST(DeviceMemory, KindsOfCudaAllocations) {
  HOLMES_REQUIRE_CUDA_DEVICE();
#if defined(HOLMES_HAVE_CUDA)
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  void* on_device = nullptr;
  ASSERT_EQ(cudaMalloc(&on_device, 1 << 20), cudaSuccess);
  EXPECT_EQ(memory_kind(on_device), MemoryKind::kDevice);
  EXPECT_EQ(memory_kind(static_cast<char*>(on_device) + 12345), MemoryKind::kDevice);
  EXPECT_EQ(memory_device(on_device), device);
  void* page_locked = nullptr;
  ASSERT_EQ(cudaMallocHost(&page_locked, 4096), cudaSuccess);
  EXPECT_EQ(memory_kind(page_locked), MemoryKind::kHost);
  EXPECT_EQ(memory_device(page_locked), -1);
  void* managed = nullptr;
  ASSERT_EQ(cudaMallocManaged(&managed, 4096), cudaSuccess);
  EXPECT_EQ(memory_kind(managed), MemoryKind::kHost) << "managed memory is host-addressable";
  std::vector<char> registered(8192);
  ASSERT_EQ(cudaHostRegister(registered.data(), registered.size(), cudaHostRegisterDefault),
            cudaSuccess);
  EXPECT_EQ(memory_kind(registered.data()), MemoryKind::kHost);
  EXPECT_EQ(cudaHostUnregister(registered.data()), cudaSuccess);
  EXPECT_EQ(cudaFree(managed), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(page_locked), cudaSuccess);
  EXPECT_EQ(cudaFree(on_device), cudaSuccess);

  DeviceBuffer scratch(4096, device);
  ASSERT_NE(scratch.data(), nullptr);
  EXPECT_EQ(scratch.size(), 4096u);
  EXPECT_EQ(scratch.device(), device);
  EXPECT_EQ(memory_kind(scratch.data()), MemoryKind::kDevice);
  PinnedBuffer staging(1 << 20, device);
  EXPECT_TRUE(staging.page_locked());
  EXPECT_EQ(memory_kind(staging.data()), MemoryKind::kHost);
  error_of([] { DeviceBuffer nowhere(16, 1000); }, HM_ERR_INVALID_ARGUMENT);
#endif
}

TEST(DeviceCopy, RoundTripsThroughPageableAndPageLockedMemory) {
  HOLMES_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(7);
  for (std::size_t bytes :
       {std::size_t{0}, std::size_t{1}, std::size_t{4097}, (std::size_t{64} << 20) + 3}) {
    Bytes source(bytes);
    for (auto& byte : source) byte = static_cast<std::uint8_t>(rng());
    DeviceBuffer first(bytes + 16);
    DeviceBuffer second(bytes + 16);
    // Pageable host memory in, device to device at an odd offset, page-locked memory out.
    copy_host_to_device(first.data(), source.data(), bytes);
    copy_device_to_device(bytes_of(second) + 3, first.data(), bytes);
    PinnedBuffer staging(bytes + 1);
    copy_device_to_host(staging.data() + 1, bytes_of(second) + 3, bytes);
    EXPECT_EQ(bytes == 0 ? 0 : std::memcmp(staging.data() + 1, source.data(), bytes), 0)
        << bytes << " bytes";
    EXPECT_EQ(download(first.data(), bytes), source) << bytes << " bytes";
  }
}

// Allocation ranges are checked against what the driver reports; plain cudaMalloc of whole
// 2 MiB pages, so that the reported range is the requested size however the driver rounds.
constexpr std::size_t kTwoMiB = std::size_t{2} << 20;

// A batch of device-to-device copies with one wait: each lands where it should (odd sizes and
// offsets, an empty one skipped), and a batch with one bad copy is refused before any runs.
TEST(DeviceCopy, ABatchLandsEveryCopyAndRefusesABadOneFirst) {
  HOLMES_REQUIRE_CUDA_DEVICE();
  const std::size_t bytes = 100003;
  Bytes source(bytes);
  for (std::size_t i = 0; i < bytes; ++i) source[i] = static_cast<std::uint8_t>(i * 7 + 3);
  DeviceBuffer from(bytes);
  DeviceBuffer to(3 * bytes);
  copy_host_to_device(from.data(), source.data(), bytes);
  const std::vector<DeviceCopy> copies = {{bytes_of(to), from.data(), bytes},
                                          {bytes_of(to) + bytes + 1, bytes_of(from) + 5, 999},
                                          {bytes_of(to) + 2 * bytes, from.data(), 0}};
  copy_device_to_device_many(copies);
  EXPECT_EQ(download(bytes_of(to), bytes), source);
  EXPECT_EQ(download(bytes_of(to) + bytes + 1, 999),
            Bytes(source.begin() + 5, source.begin() + 5 + 999));
  std::vector<std::uint8_t> host(64, 0);
  const std::vector<DeviceCopy> bad = {{bytes_of(to), bytes_of(from) + 1, 16},
                                       {bytes_of(to) + 64, host.data(), 16}};
  const std::string message =
      error_of([&] { copy_device_to_device_many(bad); }, HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("is not device memory"), std::string::npos) << message;
  EXPECT_EQ(download(bytes_of(to), 16), Bytes(source.begin(), source.begin() + 16))
      << "the first copy of a refused batch ran";
}

TEST(DeviceCopy, RefusesBadArguments) {
  HOLMES_REQUIRE_CUDA_DEVICE();
#if defined(HOLMES_HAVE_CUDA)
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, kTwoMiB), cudaSuccess);
  auto* p = static_cast<std::uint8_t*>(device);
  std::vector<std::uint8_t> host(2 * kTwoMiB);
  std::string message =
      error_of([&] { copy_device_to_host(host.data(), p + 1, kTwoMiB); }, HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("run past the end of its 2097152-byte allocation"), std::string::npos)
      << message;
  message = error_of([&] { copy_host_to_device(p, p + 4096, 16); }, HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("is device memory, not host memory"), std::string::npos) << message;
  message = error_of([&] { copy_device_to_device(p + 8, p, 64); }, HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("partly overlap"), std::string::npos) << message;
  message = error_of([&] { copy_device_to_host(nullptr, p, 16); }, HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("is null"), std::string::npos) << message;
  EXPECT_EQ(cudaFree(device), cudaSuccess);
#endif
}

// Runs device_reduce on copies of a and b placed `offset` elements into device buffers (and in
// place, dst == a) and compares with holmes::reduce on the host.
void check_reduce(hm_dtype_t dtype, hm_op_t op, std::size_t count, std::size_t offset,
                  const Bytes& a, const Bytes& b, const Bytes& expected, DeviceBuffer& da,
                  DeviceBuffer& db, DeviceBuffer& dd) {
  const std::size_t size = dtype_size(dtype);
  const std::size_t bytes = count * size;
  const std::size_t at = offset * size;
  copy_host_to_device(bytes_of(da) + at, a.data(), bytes);
  copy_host_to_device(bytes_of(db) + at, b.data(), bytes);
  device_reduce(dtype, op, bytes_of(dd) + at, bytes_of(da) + at, bytes_of(db) + at, count);
  ASSERT_EQ(testing::first_differences(dtype, expected, download(bytes_of(dd) + at, bytes)), "")
      << testing::describe(dtype, op, count) << " offset " << offset;
  device_reduce(dtype, op, bytes_of(da) + at, bytes_of(da) + at, bytes_of(db) + at, count);
  ASSERT_EQ(testing::first_differences(dtype, expected, download(bytes_of(da) + at, bytes)), "")
      << testing::describe(dtype, op, count) << " offset " << offset << " in place";
}

TEST(DeviceReduce, EveryDtypeOpAndCountMatchesTheCpuKernelBitwise) {
  HOLMES_REQUIRE_CUDA_DEVICE();
  const std::size_t counts[] = {0, 1, 7, 255, 4097, std::size_t{1} << 20};
  const std::size_t capacity = ((std::size_t{1} << 20) + 2) * 8;
  DeviceBuffer da(capacity);
  DeviceBuffer db(capacity);
  DeviceBuffer dd(capacity);
  std::mt19937_64 rng(31337);
  for (hm_dtype_t dtype : testing::kAllDtypes) {
    for (hm_op_t op : testing::kAllOps) {
      for (std::size_t count : counts) {
        const Bytes a = testing::random_inputs(dtype, count, rng);
        const Bytes b = testing::random_inputs(dtype, count, rng);
        Bytes expected(a.size());
        reduce(dtype, op, expected.data(), a.data(), b.data(), count);
        check_reduce(dtype, op, count, 0, a, b, expected, da, db, dd);
        if (count <= 4097) check_reduce(dtype, op, count, 1, a, b, expected, da, db, dd);
      }
    }
  }
}

// device_reduce_many over 1 to 9 inputs (two kernels past 8), the first input in place as
// dst, and a misaligned set: the bits of holmes::reduce applied pairwise left to right.
TEST(DeviceReduce, ManyInputsMatchPairwiseCpuKernelsBitwise) {
  HOLMES_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(99);
  const std::size_t count = 40961;
  for (hm_dtype_t dtype : testing::kAllDtypes) {
    const std::size_t size = dtype_size(dtype);
    for (hm_op_t op : testing::kAllOps) {
      for (std::size_t n : {1, 2, 4, 9}) {
        std::vector<Bytes> raw;
        std::vector<DeviceBuffer> buffers;
        std::vector<const void*> inputs;
        for (std::size_t j = 0; j < n; ++j) {
          raw.push_back(testing::random_inputs(dtype, count, rng));
          buffers.emplace_back(raw.back().size() + 16);
        }
        Bytes expected = raw[0];
        for (std::size_t j = 1; j < n; ++j) {
          reduce(dtype, op, expected.data(), expected.data(), raw[j].data(), count);
        }
        for (const std::size_t shift : {std::size_t{0}, size}) {
          inputs.clear();
          for (std::size_t j = 0; j < n; ++j) {
            // Odd inputs shifted by an element in the second pass: no common 16-byte alignment.
            const std::size_t at = (j % 2 == 1) ? shift : 0;
            copy_host_to_device(bytes_of(buffers[j]) + at, raw[j].data(), raw[j].size());
            inputs.push_back(bytes_of(buffers[j]) + at);
          }
          DeviceBuffer dst(raw[0].size());
          device_reduce_many(dtype, op, dst.data(), inputs, count);
          ASSERT_EQ(
              testing::first_differences(dtype, expected, download(dst.data(), raw[0].size())), "")
              << testing::describe(dtype, op, count) << " inputs " << n << " shift " << shift;
          // In place into the first input.
          device_reduce_many(dtype, op, const_cast<void*>(inputs[0]), inputs, count);
          ASSERT_EQ(testing::first_differences(dtype, expected, download(inputs[0], raw[0].size())),
                    "")
              << testing::describe(dtype, op, count) << " inputs " << n << " in place";
        }
      }
    }
  }
  // A later input that is dst, or none at all, is refused before the device is touched.
  DeviceBuffer a(64);
  DeviceBuffer b(64);
  const std::vector<const void*> twice = {a.data(), b.data()};
  const std::string message =
      error_of([&] { device_reduce_many(HM_FLOAT32, HM_SUM, b.data(), twice, 16); },
               HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("input 1 is dst"), std::string::npos) << message;
  error_of([&] { device_reduce_many(HM_FLOAT32, HM_SUM, a.data(), {}, 16); },
           HM_ERR_INVALID_ARGUMENT);
}

// b in page-locked host memory (read by the kernel over the bus), a and dst at different
// alignments so that the element-by-element path runs.
TEST(DeviceReduce, ReadsPageLockedHostOperandsAndMixedAlignments) {
  HOLMES_REQUIRE_CUDA_DEVICE();
  std::mt19937_64 rng(5);
  const std::size_t count = 100003;
  for (hm_dtype_t dtype : testing::kAllDtypes) {
    const std::size_t size = dtype_size(dtype);
    const Bytes a = testing::random_inputs(dtype, count, rng);
    const Bytes b = testing::random_inputs(dtype, count, rng);
    Bytes expected(a.size());
    reduce(dtype, HM_SUM, expected.data(), a.data(), b.data(), count);
    DeviceBuffer da(a.size() + 16);
    DeviceBuffer dd(a.size() + 16);
    PinnedBuffer pb(b.size() + 16);
    ASSERT_TRUE(pb.page_locked());
    std::memcpy(pb.data() + size, b.data(), b.size());
    copy_host_to_device(bytes_of(da), a.data(), a.size());
    device_reduce(dtype, HM_SUM, bytes_of(dd) + 2 * size, da.data(), pb.data() + size, count);
    ASSERT_EQ(
        testing::first_differences(dtype, expected, download(bytes_of(dd) + 2 * size, a.size())),
        "")
        << dtype_name(dtype);
  }
}

TEST(DeviceReduce, FinalizeAverageMatchesTheCpuKernelBitwise) {
  HOLMES_REQUIRE_CUDA_DEVICE();
  const std::size_t counts[] = {0, 1, 7, 255, 4097, std::size_t{1} << 20};
  DeviceBuffer data(((std::size_t{1} << 20) + 1) * 8);
  std::mt19937_64 rng(4242);
  for (hm_dtype_t dtype : testing::kAllDtypes) {
    for (int nranks : {1, 3, 8, 200}) {
      for (std::size_t count : counts) {
        const Bytes input = testing::random_inputs(dtype, count, rng);
        Bytes expected = input;
        finalize_average(dtype, expected.data(), count, nranks);
        for (std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
          std::uint8_t* at = bytes_of(data) + offset * dtype_size(dtype);
          copy_host_to_device(at, input.data(), input.size());
          device_finalize_average(dtype, at, count, nranks);
          ASSERT_EQ(testing::first_differences(dtype, expected, download(at, input.size())), "")
              << dtype_name(dtype) << " / " << nranks << " count " << count << " offset " << offset;
        }
      }
    }
  }
}

TEST(DeviceReduce, ConcurrentThreadsUseTheirOwnStreams) {
  HOLMES_REQUIRE_CUDA_DEVICE();
  constexpr std::size_t kCount = 1 << 18;
  std::vector<std::thread> threads;
  std::vector<std::string> failures(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &failures] {
      try {
        std::vector<std::int32_t> a(kCount, t + 1);
        std::vector<std::int32_t> b(kCount, 10 * (t + 1));
        DeviceBuffer da(kCount * 4);
        DeviceBuffer db(kCount * 4);
        for (int round = 0; round < 20; ++round) {
          copy_host_to_device(da.data(), a.data(), kCount * 4);
          copy_host_to_device(db.data(), b.data(), kCount * 4);
          device_reduce(HM_INT32, HM_SUM, da.data(), da.data(), db.data(), kCount);
          device_finalize_average(HM_INT32, da.data(), kCount, 11);
          std::vector<std::int32_t> out(kCount);
          copy_device_to_host(out.data(), da.data(), kCount * 4);
          if (out != std::vector<std::int32_t>(kCount, t + 1)) {
            failures[t] = "wrong result in round " + std::to_string(round);
            return;
          }
        }
      } catch (const std::exception& e) {
        failures[t] = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[t], "") << "thread " << t;
}

TEST(DeviceReduce, RefusesBadArguments) {
  HOLMES_REQUIRE_CUDA_DEVICE();
#if defined(HOLMES_HAVE_CUDA)
  void* first = nullptr;
  void* second = nullptr;
  ASSERT_EQ(cudaMalloc(&first, kTwoMiB), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&second, kTwoMiB), cudaSuccess);
  auto* p = static_cast<std::uint8_t*>(first);
  auto* q = static_cast<std::uint8_t*>(second);
  std::string message = error_of([&] { device_reduce(HM_FLOAT32, HM_SUM, p + 2, q, q, 16); },
                                 HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("dst"), std::string::npos) << message;
  EXPECT_NE(message.find("not aligned to its 4-byte elements"), std::string::npos) << message;
  // b's last element lies past the end of its allocation.
  const std::size_t count = kTwoMiB / 2 / 4 + 1;
  message = error_of([&] { device_reduce(HM_FLOAT32, HM_SUM, p, p, q + kTwoMiB / 2, count); },
                     HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("bytes at b"), std::string::npos) << message;
  EXPECT_NE(message.find("run past the end of its 2097152-byte allocation"), std::string::npos)
      << message;
  message = error_of([&] { device_reduce(HM_FLOAT32, HM_SUM, p, p + 4, q, 16); },
                     HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("partly overlap"), std::string::npos) << message;
  message = error_of([&] { device_reduce(HM_FLOAT32, static_cast<hm_op_t>(17), p, p, p, 1); },
                     HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("unknown reduction op 17"), std::string::npos) << message;
  message = error_of([&] { device_reduce(static_cast<hm_dtype_t>(42), HM_SUM, p, p, p, 1); },
                     HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("unknown dtype 42"), std::string::npos) << message;
  message =
      error_of([&] { device_finalize_average(HM_FLOAT32, p, 16, 0); }, HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("average over 0 ranks"), std::string::npos) << message;
  // After all that, the device still works: no fault reached it.
  std::vector<float> ones(16, 1.0f);
  copy_host_to_device(p, ones.data(), 64);
  device_reduce(HM_FLOAT32, HM_SUM, p, p, p, 16);
  std::vector<float> out(16);
  copy_device_to_host(out.data(), p, 64);
  EXPECT_EQ(out, std::vector<float>(16, 2.0f));
  EXPECT_EQ(cudaFree(second), cudaSuccess);
  EXPECT_EQ(cudaFree(first), cudaSuccess);
#endif
}

}  // namespace
}  // namespace holmes
