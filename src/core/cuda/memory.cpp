#include "core/cuda/memory.hpp"

#include "core/status.hpp"

#if defined(HOLMES_HAVE_CUDA)
#include "core/cuda/cuda_api.hpp"
#endif

namespace holmes {

#if defined(HOLMES_HAVE_CUDA)

MemoryKind memory_kind(const void* p) noexcept {
  if (!cuda::probe().available) return MemoryKind::kHost;
  return cuda::pointer_info(p).type == cuda::PointerType::kDevice ? MemoryKind::kDevice
                                                                  : MemoryKind::kHost;
}

int memory_device(const void* p) noexcept {
  if (!cuda::probe().available) return -1;
  const cuda::PointerInfo info = cuda::pointer_info(p);
  return info.type == cuda::PointerType::kDevice ? info.device : -1;
}

bool cuda_built() noexcept { return true; }

bool cuda_device_available(std::string* why) {
  const cuda::Probe& probe = cuda::probe();
  if (!probe.available && why != nullptr) *why = probe.why_not;
  return probe.available;
}

#else  // built without CUDA

MemoryKind memory_kind(const void*) noexcept { return MemoryKind::kHost; }

int memory_device(const void*) noexcept { return -1; }

bool cuda_built() noexcept { return false; }

bool cuda_device_available(std::string* why) {
  if (why != nullptr) *why = "built without CUDA";
  return false;
}

#endif

void require_cuda_device(const char* operation) {
  std::string why;
  if (!cuda_device_available(&why)) {
    fail(HM_ERR_UNSUPPORTED, "{}: no usable CUDA device: {}", operation, why);
  }
}

}  // namespace holmes
