#include "collectives/context.hpp"

#include "core/clock.hpp"
#include "core/status.hpp"

namespace holmes {

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

std::uint64_t collective_tag(std::uint64_t sequence, std::uint64_t step) {
  constexpr std::uint64_t kStepBits = 38;
  constexpr std::uint64_t kSequenceMask = (1ull << 24) - 1;
  return kTagCollective | ((sequence & kSequenceMask) << kStepBits) |
         (step & ((1ull << kStepBits) - 1));
}

std::uint64_t p2p_tag(std::uint64_t sequence) {
  return kTagPointToPoint | (sequence & ((1ull << 62) - 1));
}

CollectiveContext::CollectiveContext(Transport& transport, int rank, int size,
                                     std::uint64_t sequence, std::uint32_t signature,
                                     std::chrono::milliseconds timeout, std::size_t chunk_bytes,
                                     std::string what, std::vector<std::byte>* scratch_pool,
                                     std::atomic<std::uint64_t>* progress)
    : transport_(transport),
      rank_(rank),
      size_(size),
      sequence_(sequence),
      signature_(signature),
      timeout_(timeout),
      chunk_bytes_(chunk_bytes),
      what_(std::move(what)),
      scratch_pool_(scratch_pool != nullptr ? scratch_pool : &own_scratch_),
      progress_(progress) {}

std::byte* CollectiveContext::scratch(std::size_t bytes) {
  if (scratch_pool_->size() < bytes) scratch_pool_->resize(bytes);
  return scratch_pool_->data();
}

Transfer CollectiveContext::send(int peer, std::uint64_t step, std::span<const std::byte> data) {
  return {transport_.isend(peer, collective_tag(sequence_, step), signature_, data), peer, false};
}

Transfer CollectiveContext::recv(int peer, std::uint64_t step, std::span<std::byte> data) {
  return {transport_.irecv(peer, collective_tag(sequence_, step), signature_, data), peer, true};
}

void CollectiveContext::wait(const Transfer& transfer) {
  if (!transfer.request->wait_until(Deadline::after(timeout_))) {
    fail(HM_ERR_TIMEOUT, "{}: timed out after {} ms {} rank {} ({})", what_, timeout_.count(),
         transfer.receive ? "waiting for data from" : "sending to", transfer.peer,
         transport_.link(transfer.peer).description);
  }
  if (transfer.request->status() != HM_SUCCESS) {
    fail(transfer.request->status(), "{}: {}", what_, transfer.request->message());
  }
  if (progress_ != nullptr) progress_->fetch_add(1, std::memory_order_relaxed);
}

void CollectiveContext::wait_all(const std::vector<Transfer>& transfers) {
  for (const auto& t : transfers) wait(t);
}

}  // namespace holmes
