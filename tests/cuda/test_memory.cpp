// memory.hpp on any machine: what memory_kind() says about host memory, why device buffers are
// unavailable when they are, staging buffers without a GPU, and device operations refusing
// with HM_ERR_UNSUPPORTED (or, on a GPU machine, refusing host pointers).
#include "core/cuda/memory.hpp"

#include <gtest/gtest.h>
#include <holmes/error.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/cuda/ipc_memory.hpp"
#include "cuda_test_support.hpp"

#if defined(HOLMES_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace holmes {
namespace {

TEST(Memory, HostMemoryIsHost) {
  int on_stack[16] = {};
  auto on_heap = std::make_unique<double[]>(1000);
  std::vector<std::uint8_t> in_vector(1 << 20);
  void* from_malloc = std::malloc(4096);
  ASSERT_NE(from_malloc, nullptr);
  static const char kInData[] = "static data";

  EXPECT_EQ(memory_kind(on_stack), MemoryKind::kHost);
  EXPECT_EQ(memory_kind(on_heap.get()), MemoryKind::kHost);
  EXPECT_EQ(memory_kind(in_vector.data() + 12345), MemoryKind::kHost);
  EXPECT_EQ(memory_kind(from_malloc), MemoryKind::kHost);
  EXPECT_EQ(memory_kind(kInData), MemoryKind::kHost);
  EXPECT_EQ(memory_kind(nullptr), MemoryKind::kHost);
  EXPECT_EQ(memory_kind(reinterpret_cast<const void*>(std::uintptr_t{0x10})), MemoryKind::kHost)
      << "an address nothing is mapped at is not device memory either";
  EXPECT_EQ(memory_device(on_stack), -1);
  EXPECT_EQ(memory_device(from_malloc), -1);
  std::free(from_malloc);
}

// Collectives ask about every buffer: without a device the answer is a cached flag (a million
// queries take a few milliseconds), with one a driver query (well under a microsecond or two).
TEST(Memory, QueriesAreCheap) {
  if (cuda_device_available()) {
    int x = 0;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 10000; ++i) ASSERT_EQ(memory_kind(&x), MemoryKind::kHost);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
    return;
  }
  int x = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000000; ++i) ASSERT_EQ(memory_kind(&x + (i & 7)), MemoryKind::kHost);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
}

TEST(Availability, SaysWhyNot) {
  std::string why = "untouched";
  const bool available = cuda_device_available(&why);
  EXPECT_EQ(cuda_device_available(nullptr), available) << "the answer is stable";
  if (!cuda_built()) {
    EXPECT_FALSE(available);
    EXPECT_EQ(why, "built without CUDA");
    return;
  }
#if defined(HOLMES_HAVE_CUDA)
  // The same question put to the runtime directly: the reason must name its error.
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  cudaGetLastError();
  if (error == cudaSuccess && count > 0) {
    EXPECT_TRUE(available);
    EXPECT_EQ(why, "untouched") << "*why is only written when unavailable";
    return;
  }
  EXPECT_FALSE(available);
  if (error == cudaErrorInsufficientDriver) {
    EXPECT_NE(why.find("no CUDA driver"), std::string::npos) << why;
    EXPECT_NE(why.find("error 35 cudaErrorInsufficientDriver"), std::string::npos) << why;
  } else if (error == cudaSuccess || error == cudaErrorNoDevice) {
    EXPECT_EQ(why.rfind("no device", 0), 0u) << why;
  } else {
    EXPECT_NE(why.find("error " + std::to_string(static_cast<int>(error)) + " "), std::string::npos)
        << why;
  }
#endif
}

TEST(PinnedBuffer, WorksWithOrWithoutADevice) {
  PinnedBuffer buffer(1 << 20);
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_EQ(buffer.size(), std::size_t{1} << 20);
  EXPECT_EQ(buffer.span().size(), std::size_t{1} << 20);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer.data()) % PinnedBuffer::kAlignment, 0u);
  // Page-locked exactly when a device can use it; host memory either way.
  EXPECT_EQ(buffer.page_locked(), cuda_device_available());
  EXPECT_EQ(memory_kind(buffer.data()), MemoryKind::kHost);
  std::memset(buffer.data(), 0x5a, buffer.size());
  EXPECT_EQ(std::to_integer<int>(buffer.data()[buffer.size() - 1]), 0x5a);

  std::byte* const data = buffer.data();
  PinnedBuffer moved(std::move(buffer));
  EXPECT_EQ(moved.data(), data);
  EXPECT_EQ(buffer.data(), nullptr);  // NOLINT(bugprone-use-after-move): checking the move
  EXPECT_EQ(buffer.size(), 0u);
  PinnedBuffer assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.data(), data);
  EXPECT_EQ(std::to_integer<int>(assigned.data()[0]), 0x5a);

  PinnedBuffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);
}

TEST(PinnedPool, ReusesTheSmallestFittingBufferAndCapsTheCache) {
  PinnedPool pool(/*max_cached_bytes=*/3 << 20);
  PinnedBuffer big = pool.acquire(2 << 20);
  PinnedBuffer small = pool.acquire(1 << 20);
  std::byte* const big_data = big.data();
  std::byte* const small_data = small.data();
  pool.release(std::move(big));
  pool.release(std::move(small));
  EXPECT_EQ(pool.cached_bytes(), std::size_t{3} << 20);

  PinnedBuffer reused = pool.acquire(1000);  // the 1 MiB one fits best
  EXPECT_EQ(reused.data(), small_data);
  EXPECT_EQ(reused.size(), std::size_t{1} << 20);
  EXPECT_EQ(pool.cached_bytes(), std::size_t{2} << 20);
  PinnedBuffer reused_big = pool.acquire((1 << 20) + 1);
  EXPECT_EQ(reused_big.data(), big_data);
  EXPECT_EQ(pool.cached_bytes(), 0u);

  // Over the cap: the oldest cached buffers make room; a buffer bigger than the cap is freed.
  pool.release(std::move(reused_big));  // 2 MiB cached
  pool.release(std::move(reused));      // 3 MiB cached
  pool.release(pool.acquire(4 << 20));  // bigger than the cap: not kept
  EXPECT_EQ(pool.cached_bytes(), std::size_t{3} << 20);
  pool.release(PinnedBuffer(2 << 20));  // evicts the 2 MiB one, the oldest: 1 + 2 MiB fit
  EXPECT_EQ(pool.cached_bytes(), std::size_t{3} << 20);
  pool.release(PinnedBuffer(3 << 20));  // evicts both others
  EXPECT_EQ(pool.cached_bytes(), std::size_t{3} << 20);
  EXPECT_EQ(pool.acquire(1).size(), std::size_t{3} << 20);
  EXPECT_EQ(pool.cached_bytes(), 0u);
}

// Calls fn, which must throw holmes::Error with `status`; returns the message.
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

// Without a device every device operation says so, naming itself and the reason; with one,
// handing it host memory where device memory belongs is an invalid argument.
TEST(DeviceOps, RefuseWhatTheyCannotDo) {
  std::vector<float> host_a(64, 1.0f);
  std::vector<float> host_b(64, 2.0f);
  std::vector<float> host_dst(64, 0.0f);
  std::string why;
  const bool available = cuda_device_available(&why);
  const hm_status_t expected = available ? HM_ERR_INVALID_ARGUMENT : HM_ERR_UNSUPPORTED;
  struct Case {
    const char* name;
    std::function<void()> call;
  };
  const Case cases[] = {
      {"copy_device_to_host",
       [&] { copy_device_to_host(host_dst.data(), host_a.data(), 64 * sizeof(float)); }},
      {"copy_host_to_device",
       [&] { copy_host_to_device(host_dst.data(), host_a.data(), 64 * sizeof(float)); }},
      {"copy_device_to_device",
       [&] { copy_device_to_device(host_dst.data(), host_a.data(), 64 * sizeof(float)); }},
      {"device_reduce",
       [&] {
         device_reduce(HM_FLOAT32, HM_SUM, host_dst.data(), host_a.data(), host_b.data(), 64);
       }},
      {"device_finalize_average",
       [&] { device_finalize_average(HM_FLOAT32, host_dst.data(), 64, 4); }},
  };
  for (const Case& c : cases) {
    const std::string message = error_of(c.call, expected);
    EXPECT_EQ(message.rfind(std::string(c.name) + ": ", 0), 0u) << message;
    if (available) {
      EXPECT_NE(message.find("is not device memory"), std::string::npos) << message;
    } else {
      EXPECT_NE(message.find(why), std::string::npos) << message << " should include: " << why;
    }
  }
  EXPECT_EQ(host_dst, std::vector<float>(64, 0.0f)) << "nothing was written";
  if (!available) {
    // Unsupported comes first, even for calls that would be trivially empty.
    error_of([] { device_reduce(HM_FLOAT32, HM_SUM, nullptr, nullptr, nullptr, 0); },
             HM_ERR_UNSUPPORTED);
    error_of([] { copy_device_to_host(nullptr, nullptr, 0); }, HM_ERR_UNSUPPORTED);
    const std::string message = error_of([] { DeviceBuffer buffer(1024); }, HM_ERR_UNSUPPORTED);
    EXPECT_NE(message.find(why), std::string::npos) << message;
  }
}

// Device memory shared with the processes of the host (CUDA IPC): without a device both calls
// say why; with one, an exported allocation comes with a handle of 64 bytes in hex, and a handle
// that is not one is an invalid argument. (Mapping a peer's export is checked across processes
// by the device matrix, holmes_mp_device with HOLMES_TEST_REAL_CUDA=1 in gpu-check.sh.)
TEST(SharedDeviceMemory, ExportsWithAHandleAndRefusesBadOnes) {
  std::string why;
  std::string handle;
  if (!cuda_device_available(&why)) {
    auto message =
        error_of([&] { allocate_exported_device_memory(4096, 0, &handle); }, HM_ERR_UNSUPPORTED);
    EXPECT_NE(message.find(why), std::string::npos) << message;
    message =
        error_of([] { open_exported_device_memory(std::string(128, '0'), 0); }, HM_ERR_UNSUPPORTED);
    EXPECT_NE(message.find(why), std::string::npos) << message;
    return;
  }
  const auto memory = allocate_exported_device_memory(1 << 20, 0, &handle);
  ASSERT_NE(memory, nullptr);
  EXPECT_EQ(memory_kind(memory.get()), MemoryKind::kDevice);
  ASSERT_EQ(handle.size(), 128u) << handle;
  EXPECT_EQ(handle.find_first_not_of("0123456789abcdef"), std::string::npos) << handle;
  error_of([&] { allocate_exported_device_memory(0, 0, &handle); }, HM_ERR_INVALID_ARGUMENT);
  for (const std::string& bad : {std::string("zz"), std::string(128, 'g'), std::string()}) {
    const auto message =
        error_of([&] { open_exported_device_memory(bad, 0); }, HM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(message.find("not 128 hex digits"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace holmes
