// Collectives ordered on the caller's CUDA stream (hm_comm_set_cuda_stream), with NCCL's
// semantics: the call returns once enqueued; it starts after the work already on the stream and
// the work enqueued after it waits for it. The op queue's worker is the host proxy: it sleeps
// until the stream reaches the call's mark, runs the call as a blocking one would (staging,
// device reductions on its own non-blocking stream), then opens the gate the stream waits at.
// Nothing spins: the proxy polls the mark with growing sleeps, and the GPU waits on the gate.
#include <algorithm>
#include <thread>

#include "communicator/communicator_impl.hpp"
#include "communicator/runtime.hpp"
#include "core/cuda/memory.hpp"
#include "core/status.hpp"

namespace holmes::detail {
namespace {

// The proxy's polls of the mark: from 20 us, doubling, to at most 1 ms apart. A call made while
// the stream is idle starts within microseconds; one made behind a long kernel costs at most a
// thousand wake-ups a second while it waits.
constexpr auto kFirstPoll = std::chrono::microseconds(20);
constexpr auto kLongestPoll = std::chrono::microseconds(1000);

}  // namespace

void CommunicatorImpl::set_cuda_stream(void* stream) {
  DeviceMemory* device = Runtime::get().device_memory();
  if (device == nullptr) {
    require_cuda_device("hm_comm_set_cuda_stream");  // throws, saying why
    fail(HM_ERR_UNSUPPORTED, "hm_comm_set_cuda_stream: this process has no device memory");
  }
  check_usable();
  if (!stream_gate_) stream_gate_ = device->make_gate();
  if (!request_gate_) request_gate_ = device->make_gate();
  cuda_stream_ = stream;
}

void CommunicatorImpl::clear_cuda_stream() noexcept { cuda_stream_.reset(); }

void CommunicatorImpl::wait_for_stream(DeviceMemory::StreamPoint& point, const char* what) const {
  const Deadline deadline = Deadline::after(timeout_);
  GrowingPause pause(kFirstPoll, kLongestPoll);
  while (!point.reached()) {
    check_usable();  // aborted or failed meanwhile: give up at once
    if (deadline.expired()) {
      fail(HM_ERR_TIMEOUT,
           "{} on rank {}: the work enqueued on its CUDA stream before the call did not finish "
           "within {} ms",
           what, rank_, timeout_.count());
    }
    pause.sleep(deadline);
  }
}

void CommunicatorImpl::enqueue_on_stream(const CollectiveCall& call, std::uint64_t sequence,
                                         DeviceMemory& device) {
  enqueue_on_stream(device, collective_name(call.kind),
                    [this, call, sequence, device = &device] { execute(call, sequence, device); });
}

void CommunicatorImpl::enqueue_on_stream(DeviceMemory& device, std::string what,
                                         std::function<void()> work) {
  void* const stream = *cuda_stream_;
  std::shared_ptr<DeviceMemory::StreamPoint> start = device.mark(stream);
  hold_stream_for(stream, *stream_gate_, stream_tickets_, queue_,
                  [this, what = std::move(what), work = std::move(work), start] {
                    wait_for_stream(*start, what.c_str());
                    work();
                  });
}

void CommunicatorImpl::wait_on_stream(std::shared_ptr<RequestImpl> request, int* source) {
  require(request != nullptr, "hm_wait_on_stream: the request is empty");
  require(request->comm.get() == this, "hm_wait_on_stream: the request is another communicator's");
  if (!cuda_stream_.has_value()) {
    fail(HM_ERR_INVALID_ARGUMENT,
         "hm_wait_on_stream on rank {}: the communicator has no CUDA stream "
         "(hm_comm_set_cuda_stream)",
         rank_);
  }
  hold_stream_for(*cuda_stream_, *request_gate_, request_tickets_, stream_waiter_,
                  [this, request = std::move(request), source] {
                    wait(*request);
                    if (source != nullptr) *source = request->receive ? request->peer : -1;
                  });
}

void CommunicatorImpl::hold_stream_for(void* stream, DeviceMemory::StreamGate& gate,
                                       std::uint32_t& tickets, OpQueue& worker,
                                       std::function<void()> work) {
  const std::uint32_t ticket = ++tickets;
  gate.hold(stream, ticket);
  worker.submit([this, &gate, work = std::move(work), ticket] {
    try {
      work();
    } catch (const Error& e) {
      // An operation has recorded its own failure; this records the others (a timeout waiting
      // for the stream, a failed send or receive, a collective's error its request carries).
      poison(e.status(), e.what());
    } catch (const std::exception& e) {
      poison(HM_ERR_INTERNAL, e.what());
    }
    // Also after a failure: the stream goes on (its results are undefined, as with NCCL) rather
    // than hanging the GPU; the caller learns of it from hm_comm_get_async_error.
    gate.open(ticket);
  });
}

}  // namespace holmes::detail
