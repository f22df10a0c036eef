#include "transports/shm/transport.hpp"

#include <algorithm>
#include <atomic>

#include "core/status.hpp"

namespace holmes::shm {

CompletionPtr ShmTransport::irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                                  std::span<std::byte> data) {
  return post_receive(peer, tag, signature, data, std::nullopt);
}

CompletionPtr ShmTransport::irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                                         std::span<std::byte> data, const ReceiveCombine& combine) {
  // The fragments are reduced from the ring into `data` by whichever thread delivers them (this
  // one when it polls or posts directly, else the progress thread): one read of the ring instead
  // of a copy into the caller's scratch and a second read from there. Cross-memory messages and
  // fragments moved out of the ring are combined from a bounce buffer (Matcher).
  if (!tuning_.fused_reduce) return nullptr;
  require(combine_fits(combine, data.size()),
          "shm: a combining receive of {} bytes of dtype {} and op {}", data.size(),
          static_cast<int>(combine.dtype), static_cast<int>(combine.op));
  return post_receive(peer, tag, signature, data, combine);
}

CompletionPtr ShmTransport::post_receive(int peer, std::uint64_t tag, std::uint32_t signature,
                                         std::span<std::byte> data,
                                         const std::optional<ReceiveCombine>& combine) {
  directory_.require_peer(peer, "receive from");
  auto request = std::make_shared<Completion>();
  if (tuning_.caller_progress) request->set_progress(caller_progress_);
  Command c;
  c.kind = Command::Kind::kRecv;
  c.peer = peer;
  c.tag = tag;
  c.signature = signature;
  c.recv_data = data;
  c.combine = combine;
  c.request = request;
  if (post_directly(c)) return request;
  return submit_request(std::move(c));
}

bool ShmTransport::read_rings(Clock::time_point now) {
  bool busy = false;
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i].served && !peers_[i].failure.failed()) {
      busy |= read_ring(static_cast<int>(i), now);
    }
  }
  return busy;
}

bool ShmTransport::read_ring(int peer, Clock::time_point now) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  RingControl& control = own_.control(peer);
  if (!p.reader) {
    if (load_acquire(control.attached) != 0) return verify_producer(peer);
    // Never attached here; if it has closed (or died) nothing will come from it.
    if (p.segment && load_acquire(p.segment->header().closed) != 0) {
      const auto [status, message] = close_reason(p.segment->header(), peer_name(peer));
      peer_gone(peer, status, message, FailureLog::kQuiet);
    } else if (!p.ending.empty()) {
      peer_gone(peer, p.ending_status, p.ending, p.ending_log);
    }
    return false;
  }
  // Read the closed marks before the ring: whatever it wrote before closing is read first.
  const bool closed = load_acquire(control.closed) != 0 ||
                      (p.segment && load_acquire(p.segment->header().closed) != 0);
  const bool ending = !p.ending.empty();
  bool busy = false;
  std::uint64_t bytes = 0;
  std::string corrupt;
  while (bytes < kPassBytes && !p.failure.failed()) {
    auto record = p.reader->next(corrupt);
    if (!record) break;
    busy = true;
    const std::uint64_t size = record->end - record->start;
    bytes += size;
    bool keep = !closed && !ending;
    if (!on_record(peer, *record, keep) || p.failure.failed()) return true;
    if (keep) {
      p.held_by_tag[record->header.tag].push_back(p.held_base + p.held.size());
      p.held_bytes += size;
    }
    p.held.push_back(Held{record->end, size, record->header, record->payload, !keep});
  }
  if (!corrupt.empty()) {
    peer_gone(peer, HM_ERR_TRANSPORT,
              fmt::format("shm: {} corrupted its ring: {}", peer_name(peer), corrupt),
              FailureLog::kWarn);
    return true;
  }
  // Fragments wait in the ring for their receive (space is freed in ring order, so a waiting
  // fragment also holds back everything read after it) until the producer needs the room; see
  // must_make_room. Once it has closed they all are copied out: what it wrote is still
  // delivered, as unexpected messages.
  release_done(peer);
  if (closed || ending) {
    evict_held(peer, 0);
  } else if (must_make_room(peer, now)) {
    evict_held(peer, p.reader->bytes() / 4);
  }
  // Once it has closed, messages parked for a receive never come (it let go of them).
  if ((closed || ending) && p.pulls.empty() && p.reader->drained()) {
    if (!closed) {  // gone without closing: say how it was found out
      peer_gone(peer, p.ending_status, p.ending, p.ending_log);
    } else if (p.segment) {
      const auto [status, message] = close_reason(p.segment->header(), peer_name(peer));
      peer_gone(peer, status, message, FailureLog::kQuiet);
    } else {
      peer_gone(peer, HM_ERR_PEER_FAILED,
                fmt::format("{} closed its shm endpoint (process exited or communicator "
                            "destroyed) while this rank waits for data from it",
                            peer_name(peer)),
                FailureLog::kQuiet);
    }
  }
  return busy;
}

bool ShmTransport::must_make_room(int peer, Clock::time_point now) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (p.held_bytes == 0 || load_acquire(own_.control(peer).producer_waiting) == 0) {
    p.stuck_since.reset();
    return false;
  }
  // Copying a fragment out costs an allocation and a second copy, and a producer that waits for
  // space is ordinary flow control while this rank's receives trail its sends (a pipelined
  // collective sends a whole block at once and receives a few chunks ahead): the fragments are
  // then copied once, from the ring, as their receives are posted. They are moved aside only
  // when something else needs the room: a receive posted here waits for bytes the producer
  // cannot write (they are behind the waiting fragments), or the producer has made no progress
  // for a while (its send may have to complete before this rank posts the receive).
  for (const auto& [tag, request] : p.posted) {
    if (!request->done()) {
      p.stuck_since.reset();
      return true;
    }
  }
  if (!p.stuck_since || p.stuck_released != p.reader->released()) {
    p.stuck_since = now;
    p.stuck_released = p.reader->released();
    return false;
  }
  if (now - *p.stuck_since < tuning_.park_grace) return false;
  p.stuck_since = now;  // one round per grace period, should this one not free anything
  return true;
}

void ShmTransport::release_done(int peer) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  if (!p.reader) return;
  std::uint64_t released = 0;
  while (!p.held.empty() && p.held.front().done) {
    released = p.held.front().end;
    p.held.pop_front();
    ++p.held_base;
  }
  if (released == 0) return;
  p.reader->release(released);
  // A producer that ran out of space waits for this: tail store then flag load, in the same
  // total order as its flag store then tail load.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (load_relaxed(own_.control(peer).producer_waiting) != 0) {
    if (p.segment) {
      ring_doorbell(p.segment->header());
    } else {
      p.owe_wakeup = true;
      want_attach(peer);
    }
  }
}

void ShmTransport::deliver_held(int peer, std::uint64_t tag) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  const auto it = p.held_by_tag.find(tag);
  if (it == p.held_by_tag.end()) return;
  const auto sequences = std::move(it->second);
  p.held_by_tag.erase(it);
  for (const auto sequence : sequences) {
    Held& h = p.held[static_cast<std::size_t>(sequence - p.held_base)];
    h.done = true;
    p.held_bytes -= h.bytes;
    if (!deliver(peer, h.header, h.payload)) return;
  }
  release_done(peer);
}

void ShmTransport::evict_held(int peer, std::uint64_t limit) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  while (!p.failure.failed() && p.held_bytes > 0 && !p.held.empty() &&
         p.reader->cursor() - p.reader->released() > limit) {
    Held& h = p.held.front();  // the oldest: release_done() leaves a waiting one in front
    if (h.done) {
      release_done(peer);
      continue;
    }
    h.done = true;
    p.held_bytes -= h.bytes;
    auto& sequences = p.held_by_tag[h.header.tag];  // it is the first of its tag too
    if (!sequences.empty()) sequences.erase(sequences.begin());
    if (sequences.empty()) p.held_by_tag.erase(h.header.tag);
    if (!deliver(peer, h.header, h.payload)) return;
    release_done(peer);
  }
}

bool ShmTransport::deliver(int peer, const RecordHeader& h, std::span<const std::byte> payload) {
  const FragmentHeader fragment{h.tag, h.signature, h.total, h.offset, h.length};
  if (matcher_.deliver(peer, fragment, payload)) return true;
  peer_gone(peer, HM_ERR_TRANSPORT,
            fmt::format("shm: {} broke the protocol: fragments of message {:#x} disagree on its "
                        "size",
                        peer_name(peer), h.tag),
            FailureLog::kWarn);
  return false;
}

bool ShmTransport::on_record(int peer, const RingReader::Record& record, bool& keep) {
  auto& p = peers_[static_cast<std::size_t>(peer)];
  const RecordHeader& h = record.header;
  const FragmentHeader fragment{h.tag, h.signature, h.total, h.offset, h.length};
  const auto protocol_error = [&](const std::string& what) {
    peer_gone(peer, HM_ERR_TRANSPORT,
              fmt::format("shm: {} broke the protocol: {}", peer_name(peer), what),
              FailureLog::kWarn);
    return false;
  };
  if (h.total > kMaxMessageBytes || h.offset > h.total || h.length > h.total - h.offset) {
    return protocol_error(fmt::format("a record claims bytes [{}, +{}) of a {}-byte message",
                                      h.offset, h.length, h.total));
  }
  if (h.kind == static_cast<std::uint32_t>(RecordKind::kData)) {
    // Control messages (probes, verdicts) are empty and consumed by the matcher at once: never
    // held in the ring for a receive that will not come.
    if (keep && decode_control_tag(h.tag)) keep = false;
    if (keep) {
      const auto it = p.posted.find(h.tag);
      keep = it == p.posted.end() || it->second->done();  // wait in the ring for the receive
    }
    if (!keep) return deliver(peer, h, record.payload);
    // A message of another call in a slot this rank has receives posted for fails them now.
    matcher_.note_arrival(peer, h.tag, h.signature);
    // Checked now as the matcher would: fragments of one message agree on what it is.
    if (const auto it = p.held_by_tag.find(h.tag);
        it != p.held_by_tag.end() && !it->second.empty()) {
      const RecordHeader& first =
          p.held[static_cast<std::size_t>(it->second.front() - p.held_base)].header;
      if (first.total != h.total || first.signature != h.signature) {
        return protocol_error(
            fmt::format("fragments of message {:#x} disagree on its size", h.tag));
      }
    }
    return true;
  }
  keep = false;
  // kRts: the only other kind the reader lets through.
  if (!p.cma_from) return protocol_error("a cross-memory request, though this rank refused them");
  if (h.offset != 0 || h.length != h.total || h.total == 0 || h.cookie != p.rts_seen + 1) {
    return protocol_error(fmt::format("a malformed cross-memory request (cookie {}, expected {})",
                                      h.cookie, p.rts_seen + 1));
  }
  p.rts_seen = h.cookie;
  const Parked parked{fragment, h.address, h.cookie, Clock::now()};
  const auto it = p.posted.find(h.tag);
  if ((it != p.posted.end() && !it->second->done()) || tuning_.park_grace.count() == 0) {
    return start_pull(peer, parked);  // straight into the receive buffer, or not waiting for it
  }
  if (!p.parked.emplace(h.tag, parked).second) {
    return protocol_error(fmt::format("two messages with tag {:#x} at once", h.tag));
  }
  return true;
}

}  // namespace holmes::shm
