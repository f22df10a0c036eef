#include "core/cuda/ipc_memory.hpp"

#include "core/cuda/memory.hpp"
#include "core/status.hpp"
#include "core/text.hpp"

#if defined(HOLMES_HAVE_CUDA)
#include "core/cuda/cuda_api.hpp"
#endif

namespace holmes {

std::shared_ptr<std::byte> allocate_exported_device_memory(std::size_t bytes, int device,
                                                           std::string* handle) {
  require_cuda_device("allocating device memory to share");
#if defined(HOLMES_HAVE_CUDA)
  require(bytes > 0, "allocating device memory to share: 0 bytes");
  require(device >= 0 && device < cuda::probe().device_count,
          "allocating device memory to share: CUDA device {} does not exist ({} visible)", device,
          cuda::probe().device_count);
  cuda::DeviceGuard guard(device);
  void* data = nullptr;
  cuda::check(cudaMalloc(&data, bytes),
              fmt::format("allocating {} bytes to share on CUDA device {}", bytes, device));
  auto release = [device](std::byte* p) {
    // Errors are ignored: at process exit the CUDA runtime may already be unloading.
    try {
      cuda::DeviceGuard guard(device);
      cudaFree(p);
    } catch (...) {
    }
    cudaGetLastError();
  };
  std::shared_ptr<std::byte> memory(static_cast<std::byte*>(data), release);
  cudaIpcMemHandle_t exported{};
  cuda::check(cudaIpcGetMemHandle(&exported, data), "cudaIpcGetMemHandle");
  *handle = to_hex(std::as_bytes(std::span(exported.reserved)));
  return memory;
#else
  (void)bytes, (void)device, (void)handle;
  return nullptr;
#endif
}

std::shared_ptr<std::byte> open_exported_device_memory(const std::string& handle, int device) {
  require_cuda_device("mapping a peer's device memory");
#if defined(HOLMES_HAVE_CUDA)
  cudaIpcMemHandle_t exported{};
  require(from_hex(handle, std::as_writable_bytes(std::span(exported.reserved))),
          "mapping a peer's device memory: the handle is not {} hex digits: '{}'",
          2 * sizeof(exported.reserved),
          printable(handle.substr(0, 2 * sizeof(exported.reserved))));
  cuda::DeviceGuard guard(device);
  void* data = nullptr;
  const cudaError_t opened = cudaIpcOpenMemHandle(&data, exported, cudaIpcMemLazyEnablePeerAccess);
  if (opened != cudaSuccess) {
    cudaGetLastError();
    fail(HM_ERR_UNSUPPORTED, "cudaIpcOpenMemHandle on CUDA device {}: {} ({})", device,
         cudaGetErrorName(opened), cudaGetErrorString(opened));
  }
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(data), [device](std::byte* p) {
    try {
      cuda::DeviceGuard guard(device);
      cudaIpcCloseMemHandle(p);
    } catch (...) {
    }
    cudaGetLastError();
  });
#else
  (void)handle, (void)device;
  return nullptr;
#endif
}

}  // namespace holmes
