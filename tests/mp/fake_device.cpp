#include "fake_device.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/dtype.hpp"
#include "core/reduce.hpp"
#include "core/status.hpp"

namespace holmes::test {
namespace {

// How long a fake stream's wait at a gate may last before the task gives up (a test that never
// opens its gate then fails on wrong results instead of hanging).
constexpr auto kGateTimeout = std::chrono::seconds(120);

class FakePoint final : public DeviceMemory::StreamPoint {
 public:
  explicit FakePoint(FakeStream& stream) : reached_(std::make_shared<std::atomic<bool>>(false)) {
    stream.enqueue([flag = reached_] { flag->store(true, std::memory_order_release); });
  }
  bool reached() override { return reached_->load(std::memory_order_acquire); }

 private:
  std::shared_ptr<std::atomic<bool>> reached_;
};

class FakeGate final : public DeviceMemory::StreamGate {
 public:
  void hold(void* stream, std::uint32_t ticket) override {
    static_cast<FakeStream*>(stream)->enqueue([state = state_, ticket] {
      std::unique_lock lock(state->mutex);
      state->opened.wait_for(lock, kGateTimeout, [&] {
        return static_cast<std::int32_t>(state->ticket - ticket) >= 0;  // cyclic, as CUDA's GEQ
      });
    });
  }
  void open(std::uint32_t ticket) override {
    {
      std::lock_guard lock(state_->mutex);
      state_->ticket = ticket;
    }
    state_->opened.notify_all();
  }

 private:
  // Shared with the waits enqueued on streams, which may outlive the gate.
  struct State {
    std::mutex mutex;
    std::condition_variable opened;
    std::uint32_t ticket = 0;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

std::size_t page_rounded(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return std::max<std::size_t>(page, (bytes + page - 1) / page * page);
}

}  // namespace

FakeStream::FakeStream() : thread_([this] { run(); }) {}

FakeStream::~FakeStream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void FakeStream::enqueue(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
    ++enqueued_;
  }
  changed_.notify_all();
}

bool FakeStream::synchronize(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const std::uint64_t target = enqueued_;
  return changed_.wait_for(lock, timeout, [&] { return finished_ >= target; });
}

void FakeStream::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stopping, nothing left
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
    ++finished_;
    changed_.notify_all();
  }
}

std::unique_ptr<DeviceMemory::StreamPoint> FakeDeviceMemory::mark(void* stream) {
  return std::make_unique<FakePoint>(*static_cast<FakeStream*>(stream));
}

std::unique_ptr<DeviceMemory::StreamGate> FakeDeviceMemory::make_gate() {
  return std::make_unique<FakeGate>();
}

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
  bool peer = false;
  for (const void* p : pointers) {
    const Region* r = find(p);
    if (r == nullptr) fail(HM_ERR_INTERNAL, "fake device: {} is not device memory", p);
    if (std::find(opened.begin(), opened.end(), r) == opened.end()) {
      ::mprotect(r->base, r->bytes, PROT_READ | PROT_WRITE);
      opened.push_back(r);
      peer = peer || r->peer;
    }
  }
  body();
  for (const Region* r : opened) ::mprotect(r->base, r->bytes, PROT_NONE);
  if (peer) ++peer_accesses_;
}

void FakeDeviceMemory::to_host(void* host, const void* device, std::size_t bytes) {
  with_access({device}, [&] { std::memcpy(host, device, bytes); });
  std::lock_guard lock(mutex_);
  ++host_copies_;
}

void FakeDeviceMemory::from_host(void* device, const void* host, std::size_t bytes) {
  with_access({device}, [&] { std::memcpy(device, host, bytes); });
  std::lock_guard lock(mutex_);
  ++copies_in_;
  ++host_copies_;
}

void FakeDeviceMemory::copy(void* device_dst, const void* device_src, std::size_t bytes) {
  with_access({device_dst, device_src}, [&] { std::memmove(device_dst, device_src, bytes); });
}

void FakeDeviceMemory::reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
                              std::size_t count) {
  // As device_reduce: operands aligned to their elements (CUDA's kernels need it).
  for (const void* p : {static_cast<const void*>(dst), a, b}) {
    if (reinterpret_cast<std::uintptr_t>(p) % dtype_size(dtype) != 0) {
      fail(HM_ERR_INVALID_ARGUMENT, "fake device: reduce operand {} is not aligned to {} bytes",
           p, dtype_size(dtype));
    }
  }
  with_access({dst, a, b}, [&] { holmes::reduce(dtype, op, dst, a, b, count); });
  std::lock_guard lock(mutex_);
  ++reductions_;
}

void FakeDeviceMemory::finalize_average(hm_dtype_t dtype, void* data, std::size_t count,
                                        int nranks) {
  with_access({data}, [&] { holmes::finalize_average(dtype, data, count, nranks); });
}

std::shared_ptr<std::byte> FakeDeviceMemory::adopt(void* base, std::size_t length, bool peer,
                                                   std::function<void()> after_unmap) {
  {
    std::lock_guard lock(mutex_);
    regions_.push_back({static_cast<std::byte*>(base), length, peer});
  }
  return std::shared_ptr<std::byte>(
      static_cast<std::byte*>(base), [this, length, after = std::move(after_unmap)](std::byte* p) {
        {
          std::lock_guard lock(mutex_);
          regions_.erase(std::remove_if(regions_.begin(), regions_.end(),
                                        [p](const Region& r) { return r.base == p; }),
                         regions_.end());
        }
        ::munmap(p, length);
        if (after) after();
      });
}

std::shared_ptr<std::byte> FakeDeviceMemory::allocate(std::size_t bytes) {
  const std::size_t length = page_rounded(bytes);
  void* base = ::mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) fail(HM_ERR_OUT_OF_MEMORY, "fake device: mmap of {} bytes", length);
  return adopt(base, length, false, nullptr);
}

DeviceMemory::SharedMemory FakeDeviceMemory::allocate_shared(std::size_t bytes) {
  // A rank whose device cannot share (the tests of the group's agreement).
  const char* unshared = std::getenv("HOLMES_TEST_UNSHARED_RANK");
  const char* rank = std::getenv("HOLMES_RANK");
  if (unshared != nullptr && rank != nullptr && std::string(unshared) == rank) {
    fail(HM_ERR_UNSUPPORTED, "fake device: rank {} shares no memory (HOLMES_TEST_UNSHARED_RANK)",
         rank);
  }
  const std::size_t length = page_rounded(bytes);
  const int fd = ::memfd_create("holmes-fake-device", MFD_CLOEXEC);
  if (fd < 0) fail(HM_ERR_UNSUPPORTED, "fake device: memfd_create: {}", std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(length)) != 0) {
    ::close(fd);
    fail(HM_ERR_OUT_OF_MEMORY, "fake device: ftruncate of {} bytes", length);
  }
  void* base = ::mmap(nullptr, length, PROT_NONE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    ::close(fd);
    fail(HM_ERR_OUT_OF_MEMORY, "fake device: mmap of {} shared bytes", length);
  }
  // The descriptor stays open while the memory lives: it is what peers open.
  return {adopt(base, length, false, [fd] { ::close(fd); }),
          std::to_string(::getpid()) + ":" + std::to_string(fd)};
}

std::shared_ptr<std::byte> FakeDeviceMemory::open_shared(const std::string& handle,
                                                         std::size_t bytes) {
  const auto colon = handle.find(':');
  if (colon == std::string::npos) {
    fail(HM_ERR_INVALID_ARGUMENT, "fake device: handle '{}' is not <pid>:<fd>", handle);
  }
  const std::string path = "/proc/" + handle.substr(0, colon) + "/fd/" + handle.substr(colon + 1);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) fail(HM_ERR_UNSUPPORTED, "fake device: open {}: {}", path, std::strerror(errno));
  const std::size_t length = page_rounded(bytes);
  void* base = ::mmap(nullptr, length, PROT_NONE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (base == MAP_FAILED) fail(HM_ERR_UNSUPPORTED, "fake device: mmap of {}", path);
  return adopt(base, length, true, nullptr);
}

std::shared_ptr<std::byte> FakeDeviceMemory::allocate_host(std::size_t bytes) {
  auto memory = std::make_shared<std::byte[]>(bytes);
  return std::shared_ptr<std::byte>(memory, memory.get());
}

std::size_t FakeDeviceMemory::copies_in() const {
  std::lock_guard lock(mutex_);
  return copies_in_;
}

std::size_t FakeDeviceMemory::host_copies() const {
  std::lock_guard lock(mutex_);
  return host_copies_;
}

std::size_t FakeDeviceMemory::peer_accesses() const {
  std::lock_guard lock(mutex_);
  return peer_accesses_;
}

std::size_t FakeDeviceMemory::device_reductions() const {
  std::lock_guard lock(mutex_);
  return reductions_;
}

}  // namespace holmes::test
