#include "transports/shm/transport.hpp"

#include <algorithm>
#include <atomic>

#include "core/status.hpp"

namespace holmes::shm {

CompletionPtr ShmTransport::isend(int peer, std::uint64_t tag, std::uint32_t signature,
                                  std::span<const std::byte> data) {
  directory_.require_peer(peer, "send to");
  auto request = std::make_shared<Completion>();
  std::uint64_t sent = 0;
  if (write_directly(peer, tag, signature, data, sent)) {
    request->complete();
    return request;
  }
  if (tuning_.caller_progress) request->set_progress(caller_progress_);
  Command c;
  c.kind = Command::Kind::kSend;
  c.peer = peer;
  c.tag = tag;
  c.signature = signature;
  c.send_data = data;
  c.sent = sent;
  c.request = request;
  return submit_request(std::move(c));
}

bool ShmTransport::write_directly(int peer, std::uint64_t tag, std::uint32_t signature,
                                  std::span<const std::byte> data, std::uint64_t& sent) {
  // Writing here instead of on the progress thread saves a hand-off (a wakeup, on a busy host
  // a wait for the scheduler) and copies data the caller has usually just produced while it is
  // still in this core's cache; the send completes at once.
  auto& p = peers_[static_cast<std::size_t>(peer)];
  SendLane& lane = *p.lane;
  std::lock_guard lock(lane.mutex);
  sent = 0;
  if (lane.open && lane.handed_off == 0) {
    RingWriter& writer = *p.writer;
    const bool by_cma =
        tuning_.cma && data.size() >= tuning_.cma_min_bytes &&
        load_acquire(writer.control().cma) == static_cast<std::uint32_t>(CmaState::kWorks);
    bool written = false;
    while (!by_cma && (sent < data.size() || !written)) {
      const std::uint64_t length = std::min(writer.max_payload(), data.size() - sent);
      RecordHeader h{};
      h.kind = static_cast<std::uint32_t>(RecordKind::kData);
      h.signature = signature;
      h.tag = tag;
      h.total = data.size();
      h.offset = sent;
      h.length = length;
      // Full (or corrupt, which the progress thread then finds): it takes the rest.
      if (writer.write(h, data.subspan(sent, length)) != RingWriter::Result::kWritten) break;
      sent += length;
      written = true;
      ring_doorbell(p.segment->header());
    }
    if (written && sent == data.size()) return true;
  }
  ++lane.handed_off;  // from here on the progress thread owns the lane's order
  return false;
}

bool ShmTransport::write_rings() {
  bool busy = false;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    auto& p = peers_[i];
    if (p.writer && !p.failure.failed() && (!p.sends.empty() || !p.awaiting.empty())) {
      busy |= write_ring(static_cast<int>(i));
    }
  }
  return busy;
}

bool ShmTransport::write_ring(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  bool busy = complete_acknowledged(p);
  // Completed sends are completed once the lane is unlocked: a completion may run a callback
  // that sends again.
  std::vector<CompletionPtr> completed;
  bool corrupted = false;
  {
    std::lock_guard lock(p.lane->mutex);
    busy |= write_sends(p, completed, corrupted);
  }
  for (auto& request : completed) request->complete();
  if (corrupted) {
    peer_gone(peer, HM_ERR_TRANSPORT,
              fmt::format("shm: {} corrupted the ring this rank writes to", peer_name(peer)),
              FailureLog::kWarn);
    return true;
  }
  return busy;
}

bool ShmTransport::write_sends(Peer& p, std::vector<CompletionPtr>& completed, bool& corrupted) {
  RingWriter& writer = *p.writer;
  RingControl& control = writer.control();
  bool busy = false;
  const auto corrupt = [&] {
    corrupted = true;
    return true;
  };

  const bool cma =
      tuning_.cma && load_acquire(control.cma) == static_cast<std::uint32_t>(CmaState::kWorks);
  // A message goes whole by cross-memory attach or whole through the ring, decided before its
  // first byte moves (the peer may start allowing CMA in the middle of one). With every
  // acknowledgement slot in use, large messages take the ring until one frees up.
  const auto by_cma = [&](const SendOp& op) {
    return cma && op.data.size() >= tuning_.cma_min_bytes && op.sent == 0 &&
           (p.awaiting.empty() || p.awaiting.begin()->first + kAckSlots > p.next_cookie);
  };
  std::uint64_t written = 0;
  bool full = false;
  while (!p.sends.empty() && written < kPassBytes) {
    SendOp& op = p.sends.front();
    const std::uint64_t size = op.data.size();
    RecordHeader h{};
    h.signature = op.signature;
    h.tag = op.tag;
    h.total = size;
    if (by_cma(op)) {
      h.kind = static_cast<std::uint32_t>(RecordKind::kRts);
      h.offset = 0;
      h.length = size;
      h.address = reinterpret_cast<std::uintptr_t>(op.data.data());
      h.cookie = p.next_cookie;
      const auto result = writer.write(h, {});
      if (result == RingWriter::Result::kCorrupt) return corrupt();
      if (result == RingWriter::Result::kFull) {
        full = true;
        break;
      }
      op.cookie = p.next_cookie++;
      p.awaiting.emplace(op.cookie, std::move(op));
      p.sends.pop_front();
      --p.lane->handed_off;
      written += kRecordHeaderBytes;
      busy = true;
      ring_doorbell(p.segment->header());
      continue;
    }
    const std::uint64_t length = std::min(writer.max_payload(), size - op.sent);
    h.kind = static_cast<std::uint32_t>(RecordKind::kData);
    h.offset = op.sent;
    h.length = length;
    const auto result = writer.write(h, op.data.subspan(op.sent, length));
    if (result == RingWriter::Result::kCorrupt) return corrupt();
    if (result == RingWriter::Result::kFull) {
      full = true;
      break;
    }
    op.sent += length;
    written += length + kRecordHeaderBytes;
    busy = true;
    ring_doorbell(p.segment->header());
    if (op.sent == size) {
      completed.push_back(std::move(op.request));
      p.sends.pop_front();
      --p.lane->handed_off;
    }
  }

  if (full) {
    // Ask the peer for a wakeup when it frees space, then look once more: it may have freed
    // space between the failed write and the flag.
    if (!p.waiting_for_space) {
      p.waiting_for_space = true;
      store_release(control.producer_waiting, 1u);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      // The consumer may be holding fragments in the ring for receives not posted yet: this
      // tells it to move them out of the way.
      ring_doorbell(p.segment->header());
      const SendOp& op = p.sends.front();
      if (writer.fits(by_cma(op) ? 0 : std::min(writer.max_payload(), op.data.size() - op.sent))) {
        busy = true;  // loop again at once
      }
    }
  } else if (p.waiting_for_space) {
    p.waiting_for_space = false;
    store_release(control.producer_waiting, 0u);
  }
  return busy;
}

bool ShmTransport::complete_acknowledged(Peer& p) {
  if (!p.writer) return false;
  bool busy = false;
  RingControl& control = p.writer->control();
  for (auto it = p.awaiting.begin(); it != p.awaiting.end();) {
    if (load_acquire(control.rts_acked[it->first % kAckSlots]) == it->first) {
      auto request = std::move(it->second.request);
      it = p.awaiting.erase(it);
      request->complete();
      busy = true;
    } else {
      ++it;
    }
  }
  return busy;
}

}  // namespace holmes::shm
