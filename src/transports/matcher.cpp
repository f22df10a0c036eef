#include "transports/matcher.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

#include <fmt/format.h>
#include <unistd.h>

#include "core/dtype.hpp"
#include "core/reduce.hpp"

namespace holmes {
namespace {

// The machine's physical memory in bytes (read once: it does not change under a process).
std::uint64_t physical_memory_bytes() {
  static const std::uint64_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES);
    const long page_size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0) return std::numeric_limits<std::uint64_t>::max();
    return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
  }();
  return bytes;
}

// Bounds on what is kept about slots this rank has yet to reach.
constexpr std::size_t kMaxSlotsAhead = 64;
constexpr std::size_t kMaxEvidencePerSlot = 4;
// Spare buffers of unexpected pieces kept for reuse (Matcher::recycle): at most this many and
// this much, held for as long as the matcher lives. A piece may take a spare up to 4 times its
// size plus kMinSpareBytes.
constexpr std::size_t kMaxSpares = 16;
constexpr std::size_t kMaxSpareBytes = std::size_t{16} << 20;
constexpr std::size_t kMinSpareBytes = std::size_t{64} << 10;

// Marks the messages of receives that a peer's verdict failed (Matcher::failed_by_verdict).
constexpr std::string_view kLeftBecause = "left this operation because it found that the ranks";

}  // namespace

std::string describe_root(int root) {
  return root < 0 ? std::string() : fmt::format(" with root {}", root);
}

bool Matcher::failed_by_verdict(std::string_view message) {
  return message.find(kLeftBecause) != std::string_view::npos;
}

std::string Matcher::mismatch(int peer, std::uint64_t their_total, std::uint32_t their_signature,
                              std::size_t our_size, std::uint32_t our_signature) const {
  if (their_total != our_size) {
    return fmt::format("{} sent {} bytes where this rank expects {}", namer_(peer), their_total,
                       our_size);
  }
  return fmt::format(
      "{} is in a different operation (signature {:08x}, expected {:08x}): the ranks disagree "
      "on collective, count, dtype, op, root or algorithm",
      namer_(peer), their_signature, our_signature);
}

std::optional<std::string> Matcher::disagreement(const Evidence& e,
                                                 std::uint32_t our_signature) const {
  if (e.control == ControlType::kVerdict) {
    return fmt::format("{} {} disagree on it (its call{}: signature {:08x}; this rank's: {:08x})",
                       namer_(e.peer), kLeftBecause, describe_root(e.root), e.signature,
                       our_signature);
  }
  if (e.signature == our_signature) return std::nullopt;
  if (e.control == ControlType::kProbe) {
    return fmt::format(
        "{} waits in this operation for a call{} (signature {:08x}; this rank's: {:08x}): the "
        "ranks disagree on collective, count, dtype, op, root or algorithm",
        namer_(e.peer), describe_root(e.root), e.signature, our_signature);
  }
  return mismatch(e.peer, 0, e.signature, 0, our_signature);
}

void Matcher::consider(std::uint32_t slot, const Evidence& evidence) {
  if (current_ && current_->slot == slot) {
    if (current_->failure) return;
    if (auto why = disagreement(evidence, current_->signature)) fail_current(*why);
    return;
  }
  if (current_ && !slot_ahead(slot, current_->slot)) return;  // a slot this rank is done with
  auto it = ahead_.find(slot);
  if (it == ahead_.end()) {
    if (ahead_.size() >= kMaxSlotsAhead) return;
    it = ahead_.try_emplace(slot).first;
  }
  auto& kept = it->second;
  const bool known = std::any_of(kept.begin(), kept.end(), [&](const Evidence& e) {
    return e.signature == evidence.signature && e.control == evidence.control;
  });
  if (!known && kept.size() < kMaxEvidencePerSlot) kept.push_back(evidence);
}

bool Matcher::on_control(int peer, std::uint64_t tag, std::uint32_t signature) {
  const auto decoded = decode_control_tag(tag);
  if (!decoded || !decoded->valid) return false;
  consider(decoded->message.slot,
           Evidence{peer, signature, decoded->message.type, decoded->message.root});
  return true;
}

void Matcher::enter(std::uint32_t slot, std::uint32_t signature) {
  current_ = Current{slot, signature, std::nullopt};
  if (ahead_.empty()) return;
  if (const auto it = ahead_.find(slot); it != ahead_.end()) {
    for (const auto& e : it->second) {
      if (auto why = disagreement(e, signature)) {
        current_->failure = std::move(why);
        break;
      }
    }
  }
  std::erase_if(ahead_, [slot](const auto& entry) { return !slot_ahead(entry.first, slot); });
}

void Matcher::fail_current(const std::string& message) {
  current_->failure = message;
  for (auto it = posted_.begin(); it != posted_.end();) {
    if (collective_slot(it->first.tag) == current_->slot) {
      // `request` may refer to the entry itself: keep the completion alive past the erase.
      const CompletionPtr request = it->second.request;
      it = posted_.erase(it);
      request->complete(HM_ERR_MISMATCH, message);
    } else {
      ++it;
    }
  }
}

void Matcher::note_arrival(int peer, std::uint64_t tag, std::uint32_t signature) {
  if (const auto slot = collective_slot(tag)) {
    consider(*slot, Evidence{peer, signature, std::nullopt, -1});
  } else if (tag_kind(tag) == TagKind::kPointToPoint) {
    if (arrival_listener_) arrival_listener_(peer, tag);
  } else {
    on_control(peer, tag, signature);  // a malformed one is refused when it is delivered
  }
}

std::optional<Matcher::Landing> Matcher::land(int peer, const FragmentHeader& h) {
  return land_fragment(peer, h, true);
}

std::optional<Matcher::Landing> Matcher::land_fragment(int peer, const FragmentHeader& h,
                                                       bool stage) {
  // A fragment must lie inside its message; transports check this too, the matcher makes sure.
  if (h.offset > h.total || h.length > h.total - h.offset) return std::nullopt;
  if (tag_kind(h.tag) == TagKind::kControl) {
    // Consumed here, never matched with a receive; control messages have no payload.
    if (h.total != 0 || !on_control(peer, h.tag, h.signature)) return std::nullopt;
    return Landing{};
  }
  const auto slot = collective_slot(h.tag);
  if (slot) {
    consider(*slot, Evidence{peer, h.signature, std::nullopt, -1});
    // A message of a slot that failed here has no receive to go to: drop it.
    if (current_ && current_->slot == *slot && current_->failure) return Landing{};
  }
  const Key key{peer, h.tag};
  if (auto it = posted_.find(key); it != posted_.end()) {
    Posted& r = it->second;
    if (h.total != r.size || h.signature != r.signature) {
      r.request->complete(HM_ERR_MISMATCH,
                          mismatch(peer, h.total, h.signature, r.size, r.signature));
      posted_.erase(it);
      return Landing{};  // discard the payload
    }
    if (r.combine) {
      if (!stage) return Landing{nullptr, nullptr, r.request, nullptr};  // deliver() combines
      // The fragment alone, in a buffer of its size that is reused (and still in the cache)
      // for the next one: reduced from there once it is in.
      auto piece = take_piece(h.length);
      return Landing{piece->data(), nullptr, r.request, std::move(piece)};
    }
    return Landing{r.data + h.offset, nullptr, r.request, nullptr};
  }
  // A piece larger than this machine's memory cannot be held: fail as the allocation would,
  // without asking for it. A broken or hostile peer can announce any length, and some allocators
  // (the sanitizers', for one) end the process on such a request instead of throwing.
  if (h.length > physical_memory_bytes()) throw std::bad_alloc();
  auto [entry, fresh] = unexpected_.try_emplace(key);
  if (fresh) {
    entry->second.total = h.total;
    entry->second.signature = h.signature;
    if (arrival_listener_ && tag_kind(h.tag) == TagKind::kPointToPoint) {
      arrival_listener_(peer, h.tag);
    }
  } else if (entry->second.total != h.total || entry->second.signature != h.signature) {
    return std::nullopt;
  }
  auto piece = take_piece(h.length);
  return Landing{piece->data(), piece, nullptr, nullptr};
}

void Matcher::landed(int peer, const FragmentHeader& h, const Landing& landing) {
  const Key key{peer, h.tag};
  if (landing.request) {
    if (landing.staging) {
      // The transport still holds the landing: the piece becomes a spare once it lets go.
      retired_.push_back(landing.staging);
      const auto it = posted_.find(key);
      if (it == posted_.end() || it->second.request != landing.request) return;  // failed since
      combine_in(it->second, h.offset, {landing.staging->data(), h.length});
    }
    account(key, landing.request, h.length);
    return;
  }
  if (!landing.piece) return;  // discarded
  // The receive may have been posted while this piece was on its way in.
  if (auto it = posted_.find(key); it != posted_.end()) {
    if (it->second.combine) {
      combine_in(it->second, h.offset, *landing.piece);
    } else {
      std::copy(landing.piece->begin(), landing.piece->end(), it->second.data + h.offset);
    }
    account(key, it->second.request, landing.piece->size());
    return;
  }
  auto& entry = unexpected_[key];
  entry.total = h.total;
  entry.signature = h.signature;
  entry.received += landing.piece->size();
  unexpected_bytes_ += landing.piece->size();
  entry.pieces.emplace_back(h.offset, landing.piece);
}

bool Matcher::deliver(int peer, const FragmentHeader& h, std::span<const std::byte> payload) {
  const auto landing = land_fragment(peer, h, false);
  if (!landing) return false;
  if (landing->request && landing->target == nullptr) {  // combines (or takes no bytes)
    const Key key{peer, h.tag};
    if (!payload.empty()) combine_in(posted_.find(key)->second, h.offset, payload);
    account(key, landing->request, h.length);
    return true;
  }
  if (landing->target != nullptr && !payload.empty()) {
    std::memcpy(landing->target, payload.data(), payload.size());
  }
  landed(peer, h, *landing);
  return true;
}

bool Matcher::post(int peer, std::uint64_t tag, std::uint32_t signature,
                   std::span<std::byte> buffer, const CompletionPtr& request,
                   const std::optional<ReceiveCombine>& combine) {
  const Key key{peer, tag};
  Posted r{request, buffer.data(), buffer.size(), signature, 0, combine, nullptr, {}};
  if (combine && !combine_fits(*combine, buffer.size())) {
    request->complete(
        HM_ERR_INVALID_ARGUMENT,
        fmt::format("a combining receive of {} bytes of {} (op {}) from {}", buffer.size(),
                    dtype_name(combine->dtype), static_cast<int>(combine->op), namer_(peer)));
    return true;
  }
  if (const auto slot = collective_slot(tag)) {
    if (!current_ || current_->slot != *slot) enter(*slot, signature);
    if (current_->failure) {
      request->complete(HM_ERR_MISMATCH, *current_->failure);
      return true;
    }
  }
  if (auto it = unexpected_.find(key); it != unexpected_.end()) {
    Unexpected& u = it->second;
    unexpected_bytes_ -= u.received;
    if (u.total != r.size || u.signature != r.signature) {
      request->complete(HM_ERR_MISMATCH, mismatch(peer, u.total, u.signature, r.size, r.signature));
      unexpected_.erase(it);
      return true;
    }
    for (auto& [offset, bytes] : u.pieces) {
      if (r.combine) {
        combine_in(r, offset, *bytes);
      } else {
        std::copy(bytes->begin(), bytes->end(), r.data + offset);
      }
      recycle(std::move(bytes));
    }
    r.received = u.received;
    unexpected_.erase(it);
    if (r.received == r.size) {
      if (r.combine) finish_combine(r);
      request->complete();
      return true;
    }
  }
  posted_.emplace(key, std::move(r));
  return false;
}

std::shared_ptr<ByteBuffer> Matcher::take_piece(std::size_t length) {
  std::erase_if(retired_, [this](std::shared_ptr<ByteBuffer>& piece) {
    if (piece.use_count() > 1) return false;  // its transport still holds it
    recycle(std::move(piece));
    return true;
  });
  // First fit among a handful of spares; a spare far larger than the piece stays for a larger one.
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    const std::size_t capacity = (*it)->capacity();
    if (capacity < length || capacity > 4 * length + kMinSpareBytes) continue;
    auto piece = std::move(*it);
    spare_.erase(it);
    spare_bytes_ -= capacity;
    piece->resize(length);  // within its capacity: no allocation, and no zeroing (ByteBuffer)
    return piece;
  }
  return std::make_shared<ByteBuffer>(length);
}

void Matcher::recycle(std::shared_ptr<ByteBuffer> piece) {
  if (!piece || piece.use_count() != 1) return;  // a transport still writes into it
  const std::size_t capacity = piece->capacity();
  if (spare_.size() >= kMaxSpares || spare_bytes_ + capacity > kMaxSpareBytes) return;
  spare_bytes_ += capacity;
  spare_.push_back(std::move(piece));
}

void Matcher::account(const Key& key, const CompletionPtr& request, std::size_t bytes) {
  auto it = posted_.find(key);
  if (it == posted_.end() || it->second.request != request) return;
  it->second.received += bytes;
  if (it->second.received == it->second.size) {
    if (it->second.combine) finish_combine(it->second);
    // `request` may refer to the entry itself: keep the completion alive past the erase.
    const CompletionPtr done = it->second.request;
    posted_.erase(it);
    done->complete();
  }
}

void Matcher::combine_in(Posted& r, std::size_t offset, std::span<const std::byte> bytes) {
  const ReceiveCombine& c = *r.combine;
  const std::size_t es = dtype_size(c.dtype);
  if (offset % es == 0 && bytes.size() % es == 0) {
    reduce(c.dtype, c.op, r.data + offset, c.in + offset, bytes.data(), bytes.size() / es);
    return;
  }
  // Splits an element: its other part comes in another fragment, also kept here.
  if (!r.bounce) r.bounce = std::make_shared<ByteBuffer>(r.size);
  if (bytes.data() != r.bounce->data() + offset && !bytes.empty()) {
    std::memcpy(r.bounce->data() + offset, bytes.data(), bytes.size());
  }
  r.pending.emplace_back(offset, bytes.size());
}

void Matcher::finish_combine(Posted& r) {
  if (r.pending.empty()) return;
  const ReceiveCombine& c = *r.combine;
  const std::size_t es = dtype_size(c.dtype);
  std::sort(r.pending.begin(), r.pending.end());
  // Runs of adjacent ranges start and end on element boundaries: a fragment that ends inside an
  // element is followed by one that starts there, and both were kept. (Rounded outwards anyway,
  // so that a peer that sends overlapping fragments gets a wrong sum, never a read out of bounds.)
  auto reduce_run = [&](std::size_t begin, std::size_t end) {
    begin -= begin % es;
    end = std::min(r.size, end + (es - end % es) % es);
    reduce(c.dtype, c.op, r.data + begin, c.in + begin, r.bounce->data() + begin,
           (end - begin) / es);
  };
  std::size_t begin = r.pending.front().first;
  std::size_t end = begin;
  for (const auto& [offset, length] : r.pending) {
    if (offset > end) {
      reduce_run(begin, end);
      begin = offset;
    }
    end = std::max(end, offset + length);
  }
  reduce_run(begin, end);
  r.pending.clear();
}

void Matcher::fail_peer(int peer, hm_status_t status, const std::string& message) {
  for (auto it = posted_.begin(); it != posted_.end();) {
    if (it->first.peer == peer) {
      it->second.request->complete(status, message);
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = unexpected_.begin(); it != unexpected_.end();) {
    if (it->first.peer == peer && it->second.received < it->second.total) {
      unexpected_bytes_ -= it->second.received;
      it = unexpected_.erase(it);
    } else {
      ++it;
    }
  }
}

void Matcher::fail_posted(int peer, std::uint64_t tag, hm_status_t status,
                          const std::string& message) {
  auto it = posted_.find(Key{peer, tag});
  if (it == posted_.end()) return;
  it->second.request->complete(status, message);
  posted_.erase(it);
}

void Matcher::fail_all(hm_status_t status, const std::string& message) {
  for (auto& [key, r] : posted_) r.request->complete(status, message);
  posted_.clear();
  unexpected_.clear();
  unexpected_bytes_ = 0;
}

}  // namespace holmes
