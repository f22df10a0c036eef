// A device for machines without one: "device" memory is mapped PROT_NONE and opened only while
// this class itself copies or reduces, so any other access to it (the CPU reduction kernels, a
// transport reading a send buffer) faults at once. Reductions use the host kernels; everything
// else about device buffers (staging through pinned slots, device scratch, copies in and out)
// runs exactly as with CUDA.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/device_memory.hpp"

namespace holmes::test {

// A CUDA stream for the fake device: a thread that runs the tasks enqueued on it one after another,
// as a GPU runs a stream's kernels and copies. The fake's stream ordering (mark, make_gate) takes
// a FakeStream* where CUDA takes a cudaStream_t.
class FakeStream {
 public:
  FakeStream();
  ~FakeStream();  // runs what is enqueued, then joins
  FakeStream(const FakeStream&) = delete;
  FakeStream& operator=(const FakeStream&) = delete;

  void enqueue(std::function<void()> task);
  // Waits until everything enqueued so far has run; false when `timeout` passed first.
  bool synchronize(std::chrono::milliseconds timeout);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> tasks_;
  std::uint64_t enqueued_ = 0;
  std::uint64_t finished_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

class FakeDeviceMemory final : public DeviceMemory {
 public:
  bool is_device(const void* p) const override;
  void to_host(void* host, const void* device, std::size_t bytes) override;
  void from_host(void* device, const void* host, std::size_t bytes) override;
  void copy(void* device_dst, const void* device_src, std::size_t bytes) override;
  void reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
              std::size_t count) override;
  void finalize_average(hm_dtype_t dtype, void* data, std::size_t count, int nranks) override;
  std::shared_ptr<std::byte> allocate(std::size_t bytes) override;
  std::shared_ptr<std::byte> allocate_host(std::size_t bytes) override;
  // Shared "device" memory is a memfd that peers open through /proc/<pid>/fd, as CUDA IPC maps
  // a peer's allocation; the handle is "<pid>:<fd>".
  bool can_share() const override { return true; }
  SharedMemory allocate_shared(std::size_t bytes) override;
  std::shared_ptr<std::byte> open_shared(const std::string& handle, std::size_t bytes) override;
  // `stream` is a FakeStream*.
  std::unique_ptr<StreamPoint> mark(void* stream) override;
  std::unique_ptr<StreamGate> make_gate() override;

  // Operations counted, so tests can check that the device path was really taken.
  std::size_t copies_in() const;
  std::size_t device_reductions() const;
  // Copies between device and host memory, either way (staging).
  std::size_t host_copies() const;
  // Copies and reductions that touched memory mapped from a peer process (open_shared).
  std::size_t peer_accesses() const;

 private:
  struct Region {
    std::byte* base;
    std::size_t bytes;
    bool peer = false;  // mapped from another process
  };
  // Registers a fresh mapping as device memory, released (unregistered, unmapped, then
  // `after_unmap`) when the last owner lets go.
  std::shared_ptr<std::byte> adopt(void* base, std::size_t length, bool peer,
                                   std::function<void()> after_unmap);
  // Opens the regions holding `pointers` for the duration of `body`.
  template <typename Body>
  void with_access(std::initializer_list<const void*> pointers, Body body);
  const Region* find(const void* p) const;

  mutable std::mutex mutex_;
  std::vector<Region> regions_;
  std::size_t copies_in_ = 0;
  std::size_t reductions_ = 0;
  std::size_t host_copies_ = 0;
  std::size_t peer_accesses_ = 0;
};

}  // namespace holmes::test
