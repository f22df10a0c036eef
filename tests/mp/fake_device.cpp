#include "fake_device.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/reduce.hpp"
#include "core/status.hpp"

namespace holmes::test {

const FakeDeviceMemory::Region* FakeDeviceMemory::find(const void* p) const {
  const auto* b = static_cast<const std::byte*>(p);
  for (const auto& r : regions_) {
    if (b >= r.base && b < r.base + r.bytes) return &r;
  }
  return nullptr;
}

bool FakeDeviceMemory::is_device(const void* p) const {
  std::lock_guard lock(mutex_);
  return find(p) != nullptr;
}

template <typename Body>
void FakeDeviceMemory::with_access(std::initializer_list<const void*> pointers, Body body) {
  std::lock_guard lock(mutex_);
  std::vector<const Region*> opened;
  for (const void* p : pointers) {
    const Region* r = find(p);
    if (r == nullptr) fail(HM_ERR_INTERNAL, "fake device: {} is not device memory", p);
    if (std::find(opened.begin(), opened.end(), r) == opened.end()) {
      ::mprotect(r->base, r->bytes, PROT_READ | PROT_WRITE);
      opened.push_back(r);
    }
  }
  body();
  for (const Region* r : opened) ::mprotect(r->base, r->bytes, PROT_NONE);
}

void FakeDeviceMemory::to_host(void* host, const void* device, std::size_t bytes) {
  with_access({device}, [&] { std::memcpy(host, device, bytes); });
}

void FakeDeviceMemory::from_host(void* device, const void* host, std::size_t bytes) {
  with_access({device}, [&] { std::memcpy(device, host, bytes); });
  std::lock_guard lock(mutex_);
  ++copies_in_;
}

void FakeDeviceMemory::copy(void* device_dst, const void* device_src, std::size_t bytes) {
  with_access({device_dst, device_src}, [&] { std::memmove(device_dst, device_src, bytes); });
}

void FakeDeviceMemory::reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
                              std::size_t count) {
  with_access({dst, a, b}, [&] { holmes::reduce(dtype, op, dst, a, b, count); });
  std::lock_guard lock(mutex_);
  ++reductions_;
}

void FakeDeviceMemory::finalize_average(hm_dtype_t dtype, void* data, std::size_t count,
                                        int nranks) {
  with_access({data}, [&] { holmes::finalize_average(dtype, data, count, nranks); });
}

std::shared_ptr<std::byte> FakeDeviceMemory::allocate(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t length = std::max<std::size_t>(page, (bytes + page - 1) / page * page);
  void* base = ::mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) fail(HM_ERR_OUT_OF_MEMORY, "fake device: mmap of {} bytes", length);
  {
    std::lock_guard lock(mutex_);
    regions_.push_back({static_cast<std::byte*>(base), length});
  }
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(base), [this, length](std::byte* p) {
    std::lock_guard lock(mutex_);
    regions_.erase(std::remove_if(regions_.begin(), regions_.end(),
                                  [p](const Region& r) { return r.base == p; }),
                   regions_.end());
    ::munmap(p, length);
  });
}

std::shared_ptr<std::byte> FakeDeviceMemory::allocate_host(std::size_t bytes) {
  auto memory = std::make_shared<std::byte[]>(bytes);
  return std::shared_ptr<std::byte>(memory, memory.get());
}

std::size_t FakeDeviceMemory::copies_in() const {
  std::lock_guard lock(mutex_);
  return copies_in_;
}

std::size_t FakeDeviceMemory::device_reductions() const {
  std::lock_guard lock(mutex_);
  return reductions_;
}

}  // namespace holmes::test
