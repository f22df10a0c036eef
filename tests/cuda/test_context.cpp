// Asking about memory must not create CUDA contexts: a CPU-only job on a GPU machine would
// otherwise put a context (hundreds of MiB) on GPU 0 from every rank. This test runs in its own
// executable, so that it starts in a process where no test has touched a device yet.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "core/cuda/memory.hpp"
#include "cuda_test_support.hpp"

#if defined(HOLMES_HAVE_CUDA)
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

namespace holmes {
namespace {

TEST(Context, MemoryQueriesCreateNone) {
  HOLMES_REQUIRE_CUDA_DEVICE();
#if defined(HOLMES_HAVE_CUDA)
  using DeviceGetFn = CUresult (*)(CUdevice*, int);
  using PrimaryCtxGetStateFn = CUresult (*)(CUdevice, unsigned int*, int*);
  void* device_get = nullptr;
  void* get_state = nullptr;
#if CUDART_VERSION >= 12050
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuDeviceGet", &device_get, 2000, cudaEnableDefault,
                                             nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &get_state, 7000,
                                             cudaEnableDefault, nullptr),
            cudaSuccess);
#else
  ASSERT_EQ(cudaGetDriverEntryPoint("cuDeviceGet", &device_get, cudaEnableDefault, nullptr),
            cudaSuccess);
  ASSERT_EQ(
      cudaGetDriverEntryPoint("cuDevicePrimaryCtxGetState", &get_state, cudaEnableDefault, nullptr),
      cudaSuccess);
#endif
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  auto active = [&](int ordinal) {
    CUdevice handle = 0;
    EXPECT_EQ(reinterpret_cast<DeviceGetFn>(device_get)(&handle, ordinal), CUDA_SUCCESS);
    unsigned flags = 0;
    int is_active = -1;
    EXPECT_EQ(reinterpret_cast<PrimaryCtxGetStateFn>(get_state)(handle, &flags, &is_active),
              CUDA_SUCCESS);
    return is_active != 0;
  };
  for (int d = 0; d < devices; ++d) ASSERT_FALSE(active(d)) << "device " << d << " at start";

  int on_stack = 0;
  std::vector<char> on_heap(1 << 20);
  EXPECT_EQ(memory_kind(&on_stack), MemoryKind::kHost);
  EXPECT_EQ(memory_kind(on_heap.data()), MemoryKind::kHost);
  EXPECT_EQ(memory_device(on_heap.data()), -1);
  EXPECT_TRUE(cuda_device_available());
  for (int d = 0; d < devices; ++d) EXPECT_FALSE(active(d)) << "device " << d;

  // Using the last device creates a context there and nowhere else.
  const int last = devices - 1;
  {
    DeviceBuffer buffer(1024, last);
    EXPECT_EQ(memory_kind(buffer.data()), MemoryKind::kDevice);
    device_finalize_average(HM_FLOAT32, buffer.data(), 256, 2);
  }
  EXPECT_TRUE(active(last));
  for (int d = 0; d < last; ++d) EXPECT_FALSE(active(d)) << "device " << d;
#endif
}

}  // namespace
}  // namespace holmes
