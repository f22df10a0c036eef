#include "core/cuda/cuda_api.hpp"

#include <cuda.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "core/status.hpp"

namespace holmes::cuda {
namespace {

// Driver functions, looked up through the runtime so that libholmes has no link-time dependency
// on libcuda.so (which machines without a GPU lack).
using PointerGetAttributesFn = CUresult (*)(unsigned int, CUpointer_attribute*, void**,
                                            CUdeviceptr);
using DeviceGetFn = CUresult (*)(CUdevice*, int);
using PrimaryCtxGetStateFn = CUresult (*)(CUdevice, unsigned int*, int*);
using StreamWaitValue32Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

struct Driver {
  PointerGetAttributesFn pointer_get_attributes = nullptr;
  DeviceGetFn device_get = nullptr;
  PrimaryCtxGetStateFn primary_ctx_get_state = nullptr;
  // Optional: stream memory operations (stream_wait_geq); nullptr where the driver lacks them.
  StreamWaitValue32Fn stream_wait_value32 = nullptr;
};

struct ProbeAndDriver {
  Probe probe;
  Driver driver;
};

std::string describe(cudaError_t error) {
  return fmt::format("error {} {}: {}", static_cast<int>(error), cudaGetErrorName(error),
                     cudaGetErrorString(error));
}

// Looks up a driver function by name at the ABI version it was introduced with.
template <typename Fn>
bool find_driver_function(const char* name, unsigned version, Fn* fn, std::string* why) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t error =
      cudaGetDriverEntryPointByVersion(name, &address, version, cudaEnableDefault, &found);
#else
  (void)version;
  const cudaError_t error = cudaGetDriverEntryPoint(name, &address, cudaEnableDefault, &found);
#endif
  if (error != cudaSuccess || found != cudaDriverEntryPointSuccess || address == nullptr) {
    cudaGetLastError();  // clear it: nobody else should see this failure
    *why = fmt::format("the CUDA driver lacks {} ({}, lookup result {})", name, describe(error),
                       static_cast<int>(found));
    return false;
  }
  *fn = reinterpret_cast<Fn>(address);
  return true;
}

ProbeAndDriver run_probe() {
  ProbeAndDriver result;
  Probe& probe = result.probe;
  int count = 0;  // cudaGetDeviceCount leaves it unset when it fails
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();
    if (error == cudaErrorInsufficientDriver) {
      // What the runtime reports both without a driver and with one older than the runtime.
      probe.why_not =
          fmt::format("no CUDA driver, or one older than the CUDA {}.{} runtime ({})",
                      CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, describe(error));
    } else if (error == cudaErrorNoDevice) {
      probe.why_not = fmt::format("no device ({})", describe(error));
    } else {
      probe.why_not = fmt::format("CUDA failed to start ({})", describe(error));
    }
    return result;
  }
  if (count <= 0) {
    probe.why_not = "no device (the CUDA driver sees none)";
    return result;
  }
  Driver& driver = result.driver;
  if (!find_driver_function("cuPointerGetAttributes", 7000, &driver.pointer_get_attributes,
                            &probe.why_not) ||
      !find_driver_function("cuDeviceGet", 2000, &driver.device_get, &probe.why_not) ||
      !find_driver_function("cuDevicePrimaryCtxGetState", 7000, &driver.primary_ctx_get_state,
                            &probe.why_not)) {
    return result;
  }
  std::string no_memops;  // optional: stream_wait_geq says when it is missing
  find_driver_function("cuStreamWaitValue32", 12000, &driver.stream_wait_value32, &no_memops);
  probe.available = true;
  probe.device_count = count;
  return result;
}

// Process-wide and immutable once made: a function-local static, initialised thread-safely by the
// first caller.
const ProbeAndDriver& probe_and_driver() {
  static const ProbeAndDriver instance = run_probe();
  return instance;
}

const Driver& driver() { return probe_and_driver().driver; }

// One thread's streams, one per device it used; destroyed when the thread exits. Errors are
// ignored there: at process exit the CUDA runtime may already be unloading.
class ThreadStreams {
 public:
  ThreadStreams() = default;
  ThreadStreams(const ThreadStreams&) = delete;
  ThreadStreams& operator=(const ThreadStreams&) = delete;
  ~ThreadStreams() {
    for (auto& slot : slots_) {
      if (!slot) continue;
      if (slot->done != nullptr) cudaEventDestroy(slot->done);
      if (slot->stream != nullptr) cudaStreamDestroy(slot->stream);
    }
    cudaGetLastError();
  }

  ThreadStream& get(int device) {
    if (device < 0) fail(HM_ERR_INTERNAL, "CUDA stream for device {}", device);
    if (static_cast<std::size_t>(device) >= slots_.size()) slots_.resize(device + 1);
    auto& slot = slots_[device];
    if (!slot) slot = create(device);
    return *slot;
  }

 private:
  static std::unique_ptr<ThreadStream> create(int device) {
    auto slot = std::make_unique<ThreadStream>();
    slot->device = device;
    check(cudaStreamCreateWithFlags(&slot->stream, cudaStreamNonBlocking),
          "creating a CUDA stream");
    const cudaError_t event_error =
        cudaEventCreateWithFlags(&slot->done, cudaEventBlockingSync | cudaEventDisableTiming);
    if (event_error != cudaSuccess) {
      cudaStreamDestroy(slot->stream);
      fail_cuda(event_error, "creating a CUDA event");
    }
    auto attribute = [device](cudaDeviceAttr which) {
      int value = 0;
      check(cudaDeviceGetAttribute(&value, which, device), "reading a CUDA device attribute");
      return value;
    };
    slot->max_blocks = std::max(1, attribute(cudaDevAttrMultiProcessorCount)) * 8;
    slot->pageable_access = attribute(cudaDevAttrPageableMemoryAccess) != 0;
    slot->host_pointer_usable = attribute(cudaDevAttrCanUseHostPointerForRegisteredMem) != 0;
    slot->memory_pools = attribute(cudaDevAttrMemoryPoolsSupported) != 0;
    return slot;
  }

  std::vector<std::unique_ptr<ThreadStream>> slots_;
};

}  // namespace

const Probe& probe() { return probe_and_driver().probe; }

void fail_cuda(cudaError_t error, std::string_view what) {
  cudaGetLastError();  // a non-sticky error must not resurface in the next, unrelated call
  const hm_status_t status =
      error == cudaErrorMemoryAllocation ? HM_ERR_OUT_OF_MEMORY : HM_ERR_TRANSPORT;
  fail(status, "{}: CUDA {}", what, describe(error));
}

PointerInfo pointer_info(const void* p) noexcept {
  PointerInfo info;
  const Driver& d = driver();
  if (p == nullptr || d.pointer_get_attributes == nullptr) return info;
  const auto address = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(p));
  // Zeroed slots at least as wide as what the driver writes (an unsigned, a bool, an int).
  std::uint64_t memory_type = 0;
  std::uint64_t is_managed = 0;
  int ordinal = -1;
  CUpointer_attribute kind_attributes[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                           CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                           CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
  void* kind_data[] = {&memory_type, &is_managed, &ordinal};
  if (d.pointer_get_attributes(std::size(kind_attributes), kind_attributes, kind_data, address) !=
      CUDA_SUCCESS) {
    return info;
  }
  if (is_managed != 0) {
    info.type = PointerType::kManaged;
  } else if (memory_type == CU_MEMORYTYPE_DEVICE) {
    info.type = PointerType::kDevice;
  } else if (memory_type == CU_MEMORYTYPE_HOST) {
    info.type = PointerType::kPageLockedHost;
  } else {
    return info;  // unknown to CUDA: ordinary host memory
  }
  info.device = ordinal >= 0 ? ordinal : -1;
  if (info.type == PointerType::kPageLockedHost) return info;
  // Asked separately: a driver that cannot say must not hide the kind.
  CUdeviceptr range_start = 0;
  std::uint64_t range_bytes = 0;
  CUpointer_attribute range_attributes[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                            CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* range_data[] = {&range_start, &range_bytes};
  if (d.pointer_get_attributes(std::size(range_attributes), range_attributes, range_data,
                               address) == CUDA_SUCCESS) {
    info.range_start = static_cast<std::uintptr_t>(range_start);
    info.range_bytes = static_cast<std::size_t>(range_bytes);
  }
  return info;
}

bool device_in_use(int device) noexcept {
  const Driver& d = driver();
  if (d.device_get == nullptr || d.primary_ctx_get_state == nullptr || device < 0) return false;
  CUdevice handle = 0;
  if (d.device_get(&handle, device) != CUDA_SUCCESS) return false;
  unsigned flags = 0;
  int active = 0;
  if (d.primary_ctx_get_state(handle, &flags, &active) != CUDA_SUCCESS) return false;
  return active != 0;
}

DeviceGuard::DeviceGuard(int device) {
  check(cudaGetDevice(&previous_), "reading the current CUDA device");
  if (previous_ != device) {
    check(cudaSetDevice(device), fmt::format("making CUDA device {} current", device));
    switched_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (switched_ && device_in_use(previous_)) {
    cudaSetDevice(previous_);
    cudaGetLastError();
  }
}

ThreadStream& thread_stream(int device) {
  // Per thread so that concurrent callers never wait on each other's work; see ThreadStreams.
  thread_local ThreadStreams streams;
  return streams.get(device);
}

bool stream_wait_geq(cudaStream_t stream, const void* word, std::uint32_t value) {
  const Driver& d = driver();
  if (d.stream_wait_value32 == nullptr) return false;
  const auto address = static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(word));
  const CUresult result = d.stream_wait_value32(reinterpret_cast<CUstream>(stream), address, value,
                                                CU_STREAM_WAIT_VALUE_GEQ);
  if (result == CUDA_SUCCESS) return true;
  if (result == CUDA_ERROR_NOT_SUPPORTED) return false;
  fail(HM_ERR_TRANSPORT, "enqueueing a stream wait: CUDA driver error {}",
       static_cast<int>(result));
}

void synchronize(ThreadStream& stream, std::string_view what) {
  check(cudaEventRecord(stream.done, stream.stream), what);
  check(cudaEventSynchronize(stream.done), what);
}

}  // namespace holmes::cuda
