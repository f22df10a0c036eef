// Memory the CPU must not touch directly (CUDA device memory), as the collectives see it.
//
// When a collective's buffers live on a device, its CollectiveContext stages every transfer
// through pinned host slots, chunk by chunk: a chunk is copied out just before it is sent and in
// just after it arrives, so copies overlap the wire like everything else in the pipeline. The
// reductions run on the device, on the caller's buffers and device scratch. Transports only ever
// see host memory (Debian's UCX, for one, has no CUDA support).
//
// The CUDA implementation lives in src/core/cuda; tests use a fake whose "device" memory the CPU
// cannot read, so any place that would touch it directly faults.
#pragma once

#include <holmes/holmes.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/cuda/device_ops.hpp"
#include "core/status.hpp"

namespace holmes {

// dst = inputs[0] op inputs[1] op ..., pairwise left to right through reduce(dst, a, b) (dst =
// in0 op in1, then dst = dst op in2, ...), or copy(dst, src) for one input: DeviceMemory's
// reduce_many by default, and the host's. At least one input; only inputs[0] may be dst.
template <typename Reduce, typename Copy>
void reduce_left_to_right(void* dst, std::span<const void* const> inputs, Reduce&& reduce,
                          Copy&& copy) {
  require(!inputs.empty(), "reduce_many: no inputs");
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    require(inputs[i] != dst, "reduce_many: input {} is dst (only input 0 may be)", i);
  }
  if (inputs.size() == 1) {
    copy(dst, inputs[0]);
    return;
  }
  reduce(dst, inputs[0], inputs[1]);
  for (std::size_t i = 2; i < inputs.size(); ++i) reduce(dst, dst, inputs[i]);
}

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // Whether `p` points into device memory.
  virtual bool is_device(const void* p) const = 0;

  // The instance for the device that holds `p` (a machine may have several; scratch and pinned
  // staging must belong to the right one). A single-device implementation returns itself.
  virtual DeviceMemory& bound_to(const void* p) {
    (void)p;
    return *this;
  }

  // Synchronous copies. Host pointers are pinned slots from allocate_host() or caller memory.
  virtual void to_host(void* host, const void* device, std::size_t bytes) = 0;
  virtual void from_host(void* device, const void* host, std::size_t bytes) = 0;
  virtual void copy(void* device_dst, const void* device_src, std::size_t bytes) = 0;
  // Device-to-device copies whose destinations do not overlap, all done when it returns: copy()
  // each by default; a device may enqueue them all and wait once (CUDA).
  virtual void copy_many(std::span<const DeviceCopy> copies);

  // The same semantics, bit for bit, as holmes::reduce and holmes::finalize_average, on device
  // memory. dst may equal a or b.
  virtual void reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
                      std::size_t count) = 0;
  virtual void finalize_average(hm_dtype_t dtype, void* data, std::size_t count, int nranks) = 0;
  // dst = inputs[0] op inputs[1] op ... in that order: the bits of reduce() applied pairwise
  // left to right (dst = in0 op in1, then dst = dst op in2, ...), which is what the default
  // does; a device may read every input once in one pass instead (CUDA). At least one input; dst
  // may be the same pointer as inputs[0] only.
  virtual void reduce_many(hm_dtype_t dtype, hm_op_t op, void* dst,
                           std::span<const void* const> inputs, std::size_t count);

  // Device scratch, and pinned host memory for staging; freed when the last owner lets go.
  virtual std::shared_ptr<std::byte> allocate(std::size_t bytes) = 0;
  virtual std::shared_ptr<std::byte> allocate_host(std::size_t bytes) = 0;

  // Memory the processes of one host share (CUDA IPC), for the same-host engine
  // (engine/ipc_engine.hpp): device memory like allocate()'s that peers map by `handle` (text),
  // and a peer's such memory mapped into this process, where reduce() and copy() take it like
  // this process's own. Each is released when its last owner lets go. Both throw
  // HM_ERR_UNSUPPORTED where memory cannot be shared (the default).
  virtual bool can_share() const { return false; }
  struct SharedMemory {
    std::shared_ptr<std::byte> memory;
    std::string handle;
  };
  virtual SharedMemory allocate_shared(std::size_t bytes);
  virtual std::shared_ptr<std::byte> open_shared(const std::string& handle, std::size_t bytes);

  // Stream ordering (hm_comm_set_cuda_stream). A stream is the caller's cudaStream_t, opaque
  // here. A call on device buffers marks the stream where it was made (the proxy runs the call
  // once the work enqueued before it has finished) and holds the stream at a gate (work enqueued
  // after the call waits until the proxy opens it). Neither blocks the calling thread.
  class StreamPoint {
   public:
    virtual ~StreamPoint() = default;
    // Whether everything enqueued on the stream before the point has finished; never blocks.
    virtual bool reached() = 0;
  };
  class StreamGate {
   public:
    virtual ~StreamGate() = default;
    // Enqueues on `stream` a wait until the gate's ticket reaches `ticket` (compared cyclically,
    // so the 32-bit tickets may wrap).
    virtual void hold(void* stream, std::uint32_t ticket) = 0;
    // Lets every stream held at a ticket up to `ticket` go on.
    virtual void open(std::uint32_t ticket) = 0;
  };
  // Both throw HM_ERR_UNSUPPORTED where there are no streams (the default).
  virtual std::unique_ptr<StreamPoint> mark(void* stream);
  virtual std::unique_ptr<StreamGate> make_gate();
};

}  // namespace holmes
