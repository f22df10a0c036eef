// Device memory shared by the processes of one host through CUDA IPC: an allocation this process
// exports, and a peer's export mapped into this process, where kernels and copies on this
// process's streams read and write it directly (over NVLink or PCIe between GPUs, in place on the
// same GPU). The handle is text (hex of cudaIpcMemHandle_t) so it travels through the job's store.
//
// Without CUDA in the build or a usable device both throw HM_ERR_UNSUPPORTED saying why.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace holmes {

// `bytes` of device memory on `device` and, in *handle, what a peer passes to
// open_exported_device_memory to map it. The memory comes from cudaMalloc, not from a
// stream-ordered pool: the default pools' memory cannot be exported. Freed when the last owner
// lets go; peers must have unmapped it (or be done with it) by then.
std::shared_ptr<std::byte> allocate_exported_device_memory(std::size_t bytes, int device,
                                                           std::string* handle);

// Maps the allocation a peer on this host exported as `handle`, for use on `device` (peer access
// to the exporter's GPU is enabled by the mapping where they differ). Unmapped when the last
// owner lets go. HM_ERR_INVALID_ARGUMENT for a handle that is not one; HM_ERR_UNSUPPORTED where
// CUDA refuses to map it (another host, another IPC namespace, this process's own export).
std::shared_ptr<std::byte> open_exported_device_memory(const std::string& handle, int device);

}  // namespace holmes
