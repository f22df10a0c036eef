#include "collectives/context.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

#include "collectives/device_memory.hpp"
#include "collectives/engine/group_engine.hpp"
#include "collectives/staging.hpp"
#include "core/clock.hpp"
#include "core/reduce.hpp"
#include "core/status.hpp"
#include "transports/matcher.hpp"

namespace holmes {

std::string OperationName::str() const {
  return fmt::format("{} #{} ({}) on rank {}", collective, sequence, algorithm, rank);
}

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce:
      return "allreduce";
    case CollectiveKind::kReduceScatter:
      return "reduce_scatter";
    case CollectiveKind::kAllgather:
      return "allgather";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kReduce:
      return "reduce";
    case CollectiveKind::kAlltoall:
      return "alltoall";
    case CollectiveKind::kBarrier:
      return "barrier";
    case CollectiveKind::kSplit:
      return "comm_split";
    case CollectiveKind::kLinkProbe:
      return "link_probe";
  }
  return "collective";
}

std::uint32_t collective_signature(CollectiveKind kind, std::size_t count, int dtype, int op,
                                   int root) {
  // FNV-1a over the fields, fixed width and order.
  std::uint32_t hash = 2166136261u;
  auto mix = [&hash](std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) {
      hash ^= static_cast<std::uint8_t>(value >> (8 * i));
      hash *= 16777619u;
    }
  };
  mix(static_cast<std::uint8_t>(kind), 1);
  mix(count, 8);
  mix(static_cast<std::uint32_t>(dtype), 4);
  mix(static_cast<std::uint32_t>(op), 4);
  mix(static_cast<std::uint32_t>(root), 4);
  return hash;
}

CollectiveContext::CollectiveContext(Router& router, int rank, int size, std::uint64_t sequence,
                                     std::uint32_t signature, std::chrono::milliseconds timeout,
                                     std::size_t chunk_bytes, OperationName what,
                                     CollectiveResources resources)
    : router_(router),
      rank_(rank),
      size_(size),
      sequence_(sequence),
      signature_(signature),
      timeout_(timeout),
      chunk_bytes_(chunk_bytes),
      what_(what),
      resources_(resources),
      world_size_(size),
      probe_after_(std::min(kProbeAfter, timeout / 4)) {
  if (resources_.scratch == nullptr) resources_.scratch = &own_scratch_;
  if (resources_.device != nullptr && resources_.staging == nullptr) {
    fail(HM_ERR_INTERNAL, "{}: device buffers without a staging pool", what_.str());
  }
}

CollectiveContext::CollectiveContext(const CollectiveContext& parent, std::vector<int> members,
                                     std::uint64_t step_base)
    : router_(parent.router_),
      rank_(-1),
      size_(static_cast<int>(members.size())),
      sequence_(parent.sequence_),
      signature_(parent.signature_),
      timeout_(parent.timeout_),
      chunk_bytes_(parent.chunk_bytes_),
      what_(parent.what_),
      resources_(parent.resources_),
      step_base_(step_base),
      world_size_(parent.world_size_),
      root_(parent.root_),
      probe_after_(parent.probe_after_) {
  // Positions of the parent become communicator ranks here.
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i] == parent.rank_) rank_ = static_cast<int>(i);
    members[i] = parent.member(members[i]);
  }
  if (rank_ < 0) fail(HM_ERR_INTERNAL, "{}: a view that does not contain this rank", what_.str());
  members_ = std::move(members);
}

CollectiveContext CollectiveContext::view(std::vector<int> members, std::uint64_t phase) const {
  // 2^32 steps per phase: far more than any phase uses (steps x chunks), and 63 phases fit in
  // the tag's 38 step bits.
  constexpr std::uint64_t kPhaseShift = 32;
  return CollectiveContext(*this, std::move(members), step_base_ + (phase << kPhaseShift));
}

CollectiveContext CollectiveContext::shifted(std::uint64_t offset) const {
  std::vector<int> positions(static_cast<std::size_t>(size_));
  for (int i = 0; i < size_; ++i) positions[static_cast<std::size_t>(i)] = i;
  return CollectiveContext(*this, std::move(positions), step_base_ + offset);
}

CollectiveContext CollectiveContext::view(std::vector<int> members, std::uint64_t phase,
                                          ScratchSpace& scratch) const {
  CollectiveContext v = view(std::move(members), phase);
  v.resources_.scratch = &scratch;
  return v;
}

std::byte* CollectiveContext::scratch(std::size_t bytes) {
  return area(resources_.scratch->slots, bytes);
}

std::byte* CollectiveContext::phase_buffer(std::size_t bytes) {
  return area(resources_.scratch->phase, bytes);
}

std::span<ScratchSpace> CollectiveContext::segment_scratch(std::size_t segments) const {
  auto& spaces = resources_.scratch->segments;
  if (spaces.size() < segments) spaces.resize(segments);
  return {spaces.data(), segments};
}

std::byte* CollectiveContext::area(ScratchArea& a, std::size_t bytes) {
  if (on_device()) {
    if (a.device_bytes < bytes) {
      a.device = resources_.device->allocate(bytes);
      a.device_bytes = bytes;
    }
    return a.device.get();
  }
  if (a.host.size() < bytes) a.host.resize(bytes);
  return a.host.data();
}

void CollectiveContext::reduce(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a,
                               const void* b, std::size_t count) {
  if (on_device()) {
    resources_.device->reduce(dtype, op, dst, a, b, count);
  } else {
    holmes::reduce(dtype, op, dst, a, b, count);
  }
}

void CollectiveContext::copy_many(std::span<const DeviceCopy> copies) {
  if (on_device()) {
    resources_.device->copy_many(copies);
    return;
  }
  for (const DeviceCopy& c : copies) copy(c.dst, c.src, c.bytes);
}

void CollectiveContext::reduce_many(hm_dtype_t dtype, hm_op_t op, void* dst,
                                    std::span<const void* const> inputs, std::size_t count) {
  if (on_device()) {
    resources_.device->reduce_many(dtype, op, dst, inputs, count);
    return;
  }
  reduce_left_to_right(
      dst, inputs,
      [&](void* out, const void* a, const void* b) { holmes::reduce(dtype, op, out, a, b, count); },
      [&](void* out, const void* src) { copy(out, src, count * dtype_size(dtype)); });
}

void CollectiveContext::finalize_average(hm_dtype_t dtype, void* data, std::size_t count,
                                         int nranks) {
  if (on_device()) {
    resources_.device->finalize_average(dtype, data, count, nranks);
  } else {
    holmes::finalize_average(dtype, data, count, nranks);
  }
}

DeviceMemory& CollectiveContext::device_memory() const {
  if (resources_.device == nullptr)
    fail(HM_ERR_INTERNAL, "{}: the buffers are not on a device", what_.str());
  return *resources_.device;
}

GroupEngine& CollectiveContext::group_engine(GroupLevel level) const {
  return resources_.engines != nullptr ? resources_.engines->for_group(*this, level)
                                       : ring_engine();
}

void CollectiveContext::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (on_device()) {
    resources_.device->copy(dst, src, bytes);
  } else {
    std::memmove(dst, src, bytes);
  }
}

void CollectiveContext::copy_to_host(void* host, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (on_device()) {
    resources_.device->to_host(host, src, bytes);
  } else {
    std::memmove(host, src, bytes);
  }
}

void CollectiveContext::copy_from_host(void* dst, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  if (on_device()) {
    resources_.device->from_host(dst, host, bytes);
  } else {
    std::memmove(dst, host, bytes);
  }
}

Transfer CollectiveContext::send(int position, std::uint64_t step,
                                 std::span<const std::byte> data) {
  const int peer = member(position);
  const auto tag = collective_tag(sequence_, full_step(step));
  if (!on_device() || data.empty()) {
    return {router_.isend(peer, tag, signature_, data), peer, false, nullptr};
  }
  // Copy the chunk out just before it goes; the slot returns to the pool when the send is done.
  auto slot = resources_.staging->acquire(data.size(), Deadline::after(timeout_));
  resources_.device->to_host(slot.get(), data.data(), data.size());
  auto request = router_.isend(peer, tag, signature_, {slot.get(), data.size()});
  request->on_complete([slot](const Completion&) {});
  return {request, peer, false, nullptr};
}

Transfer CollectiveContext::recv(int position, std::uint64_t step, std::span<std::byte> data) {
  const int peer = member(position);
  const auto tag = collective_tag(sequence_, full_step(step));
  if (!on_device() || data.empty()) {
    return {router_.irecv(peer, tag, signature_, data), peer, true, nullptr};
  }
  auto staged = std::make_shared<StagedReceive>();
  staged->slot = resources_.staging->acquire(data.size(), Deadline::after(timeout_));
  staged->device_target = data.data();
  staged->bytes = data.size();
  auto request = router_.irecv(peer, tag, signature_, {staged->slot.get(), data.size()});
  return {request, peer, true, staged};
}

std::optional<Transfer> CollectiveContext::recv_reduce(int position, std::uint64_t step,
                                                       std::span<std::byte> dst,
                                                       const std::byte* in, hm_dtype_t dtype,
                                                       hm_op_t op) {
  if (on_device() || dst.empty()) return std::nullopt;
  const int peer = member(position);
  auto request = router_.irecv_reduce(peer, collective_tag(sequence_, full_step(step)), signature_,
                                      dst, ReceiveCombine{in, dtype, op});
  if (!request) return std::nullopt;
  return Transfer{std::move(request), peer, true, nullptr};
}

void CollectiveContext::wait(const Transfer& transfer) {
  if (!transfer.request->done()) {
    const auto start = Clock::now();
    const auto yield = router_.yield_before_sleep(transfer.peer);
    // Everything this thread drives, polled while it waits on any one of it.
    Progress* const drive = router_.caller_progress();
    bool done = false;
    if (transfer.receive && probe_after_ < timeout_) {
      done = transfer.request->wait_until(Deadline(start + probe_after_), yield, drive);
      if (!done) probe(transfer.peer);
    }
    if (!done && !transfer.request->wait_until(Deadline(start + timeout_), yield, drive)) {
      fail(HM_ERR_TIMEOUT, "{}: timed out after {} ms {} rank {} ({})", what_.str(),
           timeout_.count(), transfer.receive ? "waiting for data from" : "sending to",
           transfer.peer, router_.link(transfer.peer).description);
    }
  }
  if (transfer.request->status() != HM_SUCCESS) fail_transfer(transfer);
  if (transfer.staged && !transfer.staged->copied) {
    // The chunk is in its pinned slot: copy it in, then give the slot back.
    resources_.device->from_host(transfer.staged->device_target, transfer.staged->slot.get(),
                                 transfer.staged->bytes);
    transfer.staged->copied = true;
    transfer.staged->slot.reset();
  }
  if (resources_.progress != nullptr) {
    resources_.progress->fetch_add(1, std::memory_order_relaxed);
  }
}

void CollectiveContext::renew_drive() const {
  if (resources_.driven == nullptr) return;
  resources_.driven->end_caller_drive();
  resources_.driven->begin_caller_drive();
}

void CollectiveContext::cancel(const Transfer& transfer, std::uint64_t step) {
  if (!transfer.request->done()) {
    router_.cancel_receive(transfer.peer, collective_tag(sequence_, full_step(step)));
  }
}

void CollectiveContext::fail_transfer(const Transfer& transfer) {
  const hm_status_t status = transfer.request->status();
  const std::string& message = transfer.request->message();
  if (status == HM_ERR_MISMATCH) tell_disagreement(message);
  fail(status, "{}{}: {}", what_.str(), describe_root(root_), message);
}

void CollectiveContext::probe(int peer) {
  if (std::find(probed_.begin(), probed_.end(), peer) != probed_.end()) return;
  probed_.push_back(peer);
  try {
    // The transport keeps the send alive; nothing waits for it (a dead peer fails it, and the
    // receive that probes fails with the peer anyway).
    router_.isend(peer, control_tag(ControlType::kProbe, sequence_, root_), signature_, {});
  } catch (const Error&) {
    // A transport that refuses it: this receive still ends, by the timeout at the latest.
  }
}

void CollectiveContext::tell_disagreement(const std::string& message) {
  // Whoever found the disagreement tells everyone; a rank that a verdict stopped does not repeat
  // it (that would be n^2 messages).
  if (!Matcher::failed_by_verdict(message)) {
    const auto tag = control_tag(ControlType::kVerdict, sequence_, root_);
    const int self = member(rank_);
    std::vector<CompletionPtr> sends;
    sends.reserve(static_cast<std::size_t>(world_size_));
    for (int peer = 0; peer < world_size_; ++peer) {
      if (peer == self) continue;
      try {
        sends.push_back(router_.isend(peer, tag, signature_, {}));
      } catch (const Error&) {
        // Best effort: this rank reports the disagreement whatever happens to the verdicts.
      }
    }
    const auto bound = Deadline::after(kVerdictSendBound);
    for (const auto& send : sends) send->wait_until(bound);
  }
  // Either way, pause before this rank's connections close: ranks still waiting on it must
  // read the verdict (this rank's, or the one that stopped it, maybe still on its way from a
  // rank they never talked to) before they find this rank gone.
  std::this_thread::sleep_for(kVerdictLinger);
}

void CollectiveContext::wait_all(const std::vector<Transfer>& transfers) {
  for (const auto& t : transfers) wait(t);
}

}  // namespace holmes
