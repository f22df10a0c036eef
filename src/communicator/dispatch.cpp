// Collectives from the call to the algorithm: validation, the queue of nonblocking calls, the
// choice of algorithm and whether the caller's thread drives the transport, and waiting.
#include <optional>

#include "collectives/algorithms.hpp"
#include "collectives/staging.hpp"
#include "communicator/communicator_impl.hpp"
#include "communicator/runtime.hpp"
#include "core/dtype.hpp"
#include "core/status.hpp"

namespace holmes::detail {
void CommunicatorImpl::validate(const CollectiveCall& call) const {
  const char* name = collective_name(call.kind);
  require(dtype_valid(call.dtype), "{}: unknown dtype {} (valid: 0..{})", name,
          static_cast<int>(call.dtype), HM_DTYPE_COUNT - 1);
  require(op_valid(call.op), "{}: unknown reduction op {} (valid: 0..{})", name,
          static_cast<int>(call.op), HM_OP_COUNT - 1);
  require(call.root >= 0 && call.root < size_, "{}: root {} is outside [0, {})", name, call.root,
          size_);
  // Elements in the largest buffer the call touches.
  const std::size_t es = dtype_size(call.dtype);
  const bool scaled = call.kind == CollectiveKind::kReduceScatter ||
                      call.kind == CollectiveKind::kAllgather ||
                      call.kind == CollectiveKind::kAlltoall;
  const std::size_t factor = scaled ? static_cast<std::size_t>(size_) : 1;
  require(call.count <= kMaxBufferBytes / es / factor,
          "{}: count {} of {} x {} ranks overflows the address space", name, call.count,
          dtype_name(call.dtype), factor);
  if (call.count == 0) return;
  switch (call.kind) {
    case CollectiveKind::kBroadcast:
      require(call.recv != nullptr, "{}: buffer is NULL with count {}", name, call.count);
      break;
    case CollectiveKind::kReduce:
      require(call.send != nullptr, "{}: sendbuf is NULL with count {}", name, call.count);
      require(call.recv != nullptr || rank_ != call.root,
              "{}: recvbuf is NULL on the root (rank {}) with count {}", name, rank_, call.count);
      break;
    case CollectiveKind::kBarrier:
      break;
    default:
      require(call.send != nullptr, "{}: sendbuf is NULL with count {}", name, call.count);
      require(call.recv != nullptr, "{}: recvbuf is NULL with count {}", name, call.count);
  }
}

DeviceMemory* CommunicatorImpl::device_of(const CollectiveCall& call) const {
  DeviceMemory* device = Runtime::get().device_memory();
  if (device == nullptr || call.count == 0) return nullptr;
  const bool send_on_device = call.send != nullptr && device->is_device(call.send);
  const bool recv_on_device = call.recv != nullptr && device->is_device(call.recv);
  if (call.send != nullptr && call.recv != nullptr && send_on_device != recv_on_device) {
    fail(HM_ERR_INVALID_ARGUMENT, "{}: {} is device memory but {} is host memory",
         collective_name(call.kind), send_on_device ? "sendbuf" : "recvbuf",
         send_on_device ? "recvbuf" : "sendbuf");
  }
  if (!send_on_device && !recv_on_device) return nullptr;
  return &device->bound_to(send_on_device ? call.send : call.recv);
}

StagingPool& CommunicatorImpl::staging(DeviceMemory& device) {
  std::call_once(staging_made_, [&] { staging_ = std::make_unique<StagingPool>(device); });
  return *staging_;
}

bool CommunicatorImpl::takes_group_engine(const CollectiveCall& call,
                                          const DeviceMemory* device) const {
  // Device buffers on a communicator of one island: the hierarchical algorithm, whose one group
  // runs on its engine (CUDA IPC inside a host, NCCL inside an island; a broadcast where the
  // engine has one, else a chain or tree), unless the engine is Holmes's ring anyway or an
  // algorithm is forced. The same on every rank: every rank passes
  // device buffers (as with NCCL), and the rest are agreed settings and facts.
  const bool kind =
      call.kind == CollectiveKind::kAllreduce || call.kind == CollectiveKind::kReduceScatter ||
      call.kind == CollectiveKind::kAllgather || call.kind == CollectiveKind::kBroadcast;
  if (device == nullptr || !kind || size_ < 2 || hierarchy_.islands.size() != 1) return false;
  if (settings_.text(Setting::kGroupEngine) == "ring") return false;
  std::lock_guard lock(algorithm_mutex_);
  return forced_.get(call.kind) == Algorithm::kAuto;
}

void CommunicatorImpl::execute(const CollectiveCall& call, std::uint64_t sequence,
                               DeviceMemory* device) {
  check_usable();
  // The split exchanges always take the plain ring: they run before anything else is agreed.
  // So does the link probe: it is what gives the model its numbers.
  const bool internal =
      call.kind == CollectiveKind::kSplit || call.kind == CollectiveKind::kLinkProbe;
  // Device buffers are priced with a model of their own: the choice and the algorithms' inner
  // choices (the lanes', the rooted phases') both read it. Host buffers read the communicator's.
  std::optional<CostModel> device_model;
  if (device != nullptr) device_model = cost_model_.for_device_buffers();
  const CostModel& model = device_model ? *device_model : cost_model_;
  const Algorithm algorithm =
      internal ? Algorithm::kRing
      : takes_group_engine(call, device)
          ? Algorithm::kHierarchical
          : query_algorithm(call.kind, call.count, call.dtype, &model).algorithm;
  // The algorithm is part of the signature: ranks that chose differently (a different
  // HOLMES_ALGO or cost numbers) fail with HM_ERR_MISMATCH where their messages meet.
  const auto signature =
      collective_signature(call.kind, call.count, call.dtype, call.op, call.root) ^
      (static_cast<std::uint32_t>(algorithm) * 0x9e3779b9u);
  // A small call is over in microseconds, waits polling all along and never computes for long:
  // its thread drives the transport, so peers need not wake the transport's thread meanwhile.
  // (The shared-memory allreduce sends no messages: nothing to drive.)
  const std::size_t call_bytes = call.count * dtype_size(call.dtype);
  const bool drive =
      call_bytes <= (device != nullptr ? kDeviceCallerDriveMaxBytes : kCallerDriveMaxBytes) &&
      algorithm != Algorithm::kSharedMemory;
  const DriveScope scope(drive ? transport_.get() : nullptr, true);
  CollectiveContext ctx(
      *transport_, rank_, size_, sequence, signature, timeout_, chunk_bytes_,
      OperationName{collective_name(call.kind), sequence, algorithm_name(algorithm), rank_},
      CollectiveResources{&scratch_, &progress_, device,
                          device != nullptr ? &staging(*device) : nullptr, scope.transport(),
                          engines_.get()});
  const AlgorithmEntry* entry = find_algorithm(call.kind, algorithm);
  if (entry == nullptr) {
    fail(HM_ERR_INTERNAL, "{} has no algorithm '{}'", collective_name(call.kind),
         algorithm_name(algorithm));
  }
  try {
    entry->run(ctx, hierarchy_, model, call);
  } catch (const Error& failure) {
    const Error e = settle(failure);
    poison(e.status(), e.what());
    throw e;
  } catch (const std::bad_alloc&) {
    poison(HM_ERR_OUT_OF_MEMORY, "out of memory");
    throw Error(HM_ERR_OUT_OF_MEMORY,
                fmt::format("{}: out of memory for scratch buffers", collective_name(call.kind)));
  }
}

std::shared_ptr<RequestImpl> CommunicatorImpl::collective(const CollectiveCall& call,
                                                          CallMode mode) {
  const bool blocking = mode == CallMode::kBlocking;
  validate(call);
  DeviceMemory* device = device_of(call);
  check_usable();
  const std::uint64_t sequence = next_sequence_++;
  if (ordered_on_stream(device, mode)) {
    enqueue_on_stream(call, sequence, *device);
    return nullptr;
  }
  if (blocking && queue_.idle()) {
    execute(call, sequence, device);
    return nullptr;
  }
  auto request = std::make_shared<RequestImpl>();
  request->comm = shared_from_this();
  request->request = std::make_shared<Completion>();
  request->collective = true;
  request->what = collective_name(call.kind);
  // A nonblocking call on device buffers while a stream is set starts after the work enqueued on
  // the stream before it (its inputs are written), as torch's asynchronous collectives do; the
  // stream is not held: the caller waits on the request before reading the results.
  std::shared_ptr<DeviceMemory::StreamPoint> start;
  if (device != nullptr && cuda_stream_.has_value()) start = device->mark(*cuda_stream_);
  queue_.submit([this, call, sequence, device, start, done = request->request] {
    try {
      if (start != nullptr) wait_for_stream(*start, collective_name(call.kind));
      execute(call, sequence, device);
      done->complete();
    } catch (const Error& e) {
      done->complete(e.status(), e.what());
    } catch (const std::exception& e) {
      done->complete(HM_ERR_INTERNAL, e.what());
    }
  });
  if (blocking) {
    wait(*request);
    return nullptr;
  }
  return request;
}

void CommunicatorImpl::wait(RequestImpl& r) {
  if (r.collective) {
    // The worker bounds each of its own waits by the timeout; leave room for the operations
    // queued ahead of this one.
    const auto ahead = static_cast<long long>(queue_.pending()) + 1;
    const auto bound = timeout_ * ahead + std::chrono::seconds(5);
    if (!r.request->wait_until(Deadline::after(bound))) {
      const auto message =
          fmt::format("{}: no result after {} ms (worker stuck)", r.what, bound.count());
      poison(HM_ERR_TIMEOUT, message);
      r.request->wait_until(Deadline::after(std::chrono::seconds(30)));
      fail(HM_ERR_TIMEOUT, "{}", message);
    }
    if (r.request->status() != HM_SUCCESS) throw Error(r.request->status(), r.request->message());
    return;
  }
  if (r.any) resolve_source(r, /*block=*/true);
  if (!r.request->wait_until(Deadline::after(timeout_), transport_->yield_before_sleep(r.peer))) {
    const auto message = fmt::format("{} on rank {}: timed out after {} ms ({})", r.what, rank_,
                                     timeout_.count(), transport_->link(r.peer).description);
    poison(HM_ERR_TIMEOUT, message);
    fail(HM_ERR_TIMEOUT, "{}", message);
  }
  if (r.request->status() != HM_SUCCESS) {
    const Error e = settle(Error(r.request->status(), fmt::format("{} on rank {}: {}", r.what,
                                                                  rank_, r.request->message())));
    poison(e.status(), e.what());
    throw e;
  }
  if (r.finish) {
    auto finish = std::move(r.finish);
    r.finish = nullptr;
    finish();
  }
}

bool CommunicatorImpl::test(RequestImpl& r) {
  if (r.any && !resolve_source(r, /*block=*/false)) return false;
  if (!r.request->done()) return false;
  wait(r);  // done: returns at once, or throws its error
  return true;
}

}  // namespace holmes::detail
