#include "communicator/cuda_device.hpp"

#ifdef HOLMES_HAVE_CUDA
#include <map>
#include <mutex>

#include "core/cuda/ipc_memory.hpp"
#include "core/cuda/memory.hpp"
#include "core/cuda/stream_order.hpp"
#endif

namespace holmes::detail {

#ifdef HOLMES_HAVE_CUDA
namespace {

// The caller's stream, as DeviceMemory's stream ordering sees it (core/cuda/stream_order.hpp).
class CudaPoint final : public DeviceMemory::StreamPoint {
 public:
  explicit CudaPoint(void* stream) : point_(stream) {}
  bool reached() override { return point_.reached(); }

 private:
  CudaStreamPoint point_;
};

class CudaGate final : public DeviceMemory::StreamGate {
 public:
  void hold(void* stream, std::uint32_t ticket) override { gate_.hold(stream, ticket); }
  void open(std::uint32_t ticket) override { gate_.open(ticket); }

 private:
  CudaStreamGate gate_;
};

// One GPU: every allocation is made on it, whatever device the calling thread has current (a
// communicator's worker thread starts on device 0).
class CudaDevice final : public DeviceMemory {
 public:
  explicit CudaDevice(int device) : device_(device) {}
  bool is_device(const void* p) const override { return memory_kind(p) == MemoryKind::kDevice; }
  void to_host(void* host, const void* device, std::size_t bytes) override {
    copy_device_to_host(host, device, bytes);
  }
  void from_host(void* device, const void* host, std::size_t bytes) override {
    copy_host_to_device(device, host, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    copy_device_to_device(dst, src, bytes);
  }
  void copy_many(std::span<const DeviceCopy> copies) override {
    copy_device_to_device_many(copies);
  }
  void reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
              std::size_t count) override {
    device_reduce(dtype, op, dst, a, b, count);
  }
  void reduce_many(hm_dtype_t dtype, hm_op_t op, void* dst, std::span<const void* const> inputs,
                   std::size_t count) override {
    device_reduce_many(dtype, op, dst, inputs, count);
  }
  void finalize_average(hm_dtype_t dtype, void* data, std::size_t count, int nranks) override {
    device_finalize_average(dtype, data, count, nranks);
  }
  std::shared_ptr<std::byte> allocate(std::size_t bytes) override {
    auto buffer = std::make_shared<DeviceBuffer>(bytes, device_);
    return std::shared_ptr<std::byte>(buffer, static_cast<std::byte*>(buffer->data()));
  }
  std::shared_ptr<std::byte> allocate_host(std::size_t bytes) override {
    auto buffer = std::make_shared<PinnedBuffer>(bytes, device_);
    return std::shared_ptr<std::byte>(buffer, buffer->data());
  }
  bool can_share() const override { return true; }
  SharedMemory allocate_shared(std::size_t bytes) override {
    SharedMemory shared;
    shared.memory = allocate_exported_device_memory(bytes, device_, &shared.handle);
    return shared;
  }
  std::shared_ptr<std::byte> open_shared(const std::string& handle, std::size_t bytes) override {
    (void)bytes;  // CUDA maps the whole allocation
    return open_exported_device_memory(handle, device_);
  }
  std::unique_ptr<StreamPoint> mark(void* stream) override {
    return std::make_unique<CudaPoint>(stream);
  }
  std::unique_ptr<StreamGate> make_gate() override { return std::make_unique<CudaGate>(); }

 private:
  int device_;
};

// Every GPU of the machine, each with its own CudaDevice, created when first used.
class CudaDevices final : public DeviceMemory {
 public:
  bool is_device(const void* p) const override { return memory_kind(p) == MemoryKind::kDevice; }
  DeviceMemory& bound_to(const void* p) override {
    const int device = memory_device(p);
    std::lock_guard lock(mutex_);
    auto& slot = devices_[device];
    if (!slot) slot = std::make_unique<CudaDevice>(device);
    return *slot;
  }
  // The collectives only call these on a bound instance; forwarding keeps them correct anyway.
  void to_host(void* host, const void* device, std::size_t bytes) override {
    bound_to(device).to_host(host, device, bytes);
  }
  void from_host(void* device, const void* host, std::size_t bytes) override {
    bound_to(device).from_host(device, host, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    bound_to(dst).copy(dst, src, bytes);
  }
  void copy_many(std::span<const DeviceCopy> copies) override {
    copy_device_to_device_many(copies);  // each on its destination's device
  }
  void reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
              std::size_t count) override {
    bound_to(dst).reduce(dtype, op, dst, a, b, count);
  }
  void reduce_many(hm_dtype_t dtype, hm_op_t op, void* dst, std::span<const void* const> inputs,
                   std::size_t count) override {
    bound_to(dst).reduce_many(dtype, op, dst, inputs, count);
  }
  void finalize_average(hm_dtype_t dtype, void* data, std::size_t count, int nranks) override {
    bound_to(data).finalize_average(dtype, data, count, nranks);
  }
  std::shared_ptr<std::byte> allocate(std::size_t bytes) override {
    auto buffer = std::make_shared<DeviceBuffer>(bytes);
    return std::shared_ptr<std::byte>(buffer, static_cast<std::byte*>(buffer->data()));
  }
  bool can_share() const override { return true; }  // on a bound instance
  std::shared_ptr<std::byte> allocate_host(std::size_t bytes) override {
    auto buffer = std::make_shared<PinnedBuffer>(bytes);
    return std::shared_ptr<std::byte>(buffer, buffer->data());
  }
  std::unique_ptr<StreamPoint> mark(void* stream) override {
    return std::make_unique<CudaPoint>(stream);
  }
  std::unique_ptr<StreamGate> make_gate() override { return std::make_unique<CudaGate>(); }

 private:
  std::mutex mutex_;
  std::map<int, std::unique_ptr<CudaDevice>> devices_;
};

}  // namespace

std::unique_ptr<DeviceMemory> make_cuda_device_memory() {
  if (!cuda_device_available(nullptr)) return nullptr;
  return std::make_unique<CudaDevices>();
}

#else

std::unique_ptr<DeviceMemory> make_cuda_device_memory() { return nullptr; }

#endif

}  // namespace holmes::detail
