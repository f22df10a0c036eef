#include "transports/matcher.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace holmes {

std::string Matcher::mismatch(int peer, std::uint64_t their_total, std::uint32_t their_signature,
                              std::size_t our_size, std::uint32_t our_signature) const {
  if (their_total != our_size) {
    return fmt::format("{} sent {} bytes where this rank expects {}", namer_(peer), their_total,
                       our_size);
  }
  return fmt::format(
      "{} is in a different operation (signature {:08x}, expected {:08x}): the ranks disagree "
      "on collective, count, dtype, op or root",
      namer_(peer), their_signature, our_signature);
}

std::optional<std::uint64_t> Matcher::operation_of(std::uint64_t tag) {
  // 2 bits kind (binary 10: collective) | 24 bits sequence | 38 bits step. Other kinds (point to
  // point, and the plain tags transport tests use) are not checked per operation.
  constexpr int kStepBits = 38;
  if ((tag >> 62) != 2) return std::nullopt;
  return tag >> kStepBits;
}

void Matcher::fail_other_operation(int peer, std::uint64_t operation, std::uint32_t signature) {
  for (auto it = posted_.begin(); it != posted_.end();) {
    const auto op = operation_of(it->first.tag);
    if (it->first.peer == peer && op && *op == operation && it->second.signature != signature) {
      it->second.request->complete(
          HM_ERR_MISMATCH,
          mismatch(peer, it->second.size, signature, it->second.size, it->second.signature));
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
}

void Matcher::note_arrival(int peer, std::uint64_t tag, std::uint32_t signature) {
  const auto op = operation_of(tag);
  if (!op) return;
  arrived_operation_[peer] = {*op, signature};
  const auto posted = posted_operation_.find(peer);
  if (posted != posted_operation_.end() && posted->second.id == *op &&
      posted->second.signature != signature) {
    fail_other_operation(peer, *op, signature);
  }
}

std::optional<Matcher::Landing> Matcher::land(int peer, const FragmentHeader& h) {
  // A fragment must lie inside its message; transports check this too, the matcher makes sure.
  if (h.offset > h.total || h.length > h.total - h.offset) return std::nullopt;
  note_arrival(peer, h.tag, h.signature);
  const Key key{peer, h.tag};
  if (auto it = posted_.find(key); it != posted_.end()) {
    Posted& r = it->second;
    if (h.total != r.size || h.signature != r.signature) {
      r.request->complete(HM_ERR_MISMATCH,
                          mismatch(peer, h.total, h.signature, r.size, r.signature));
      posted_.erase(it);
      return Landing{};  // discard the payload
    }
    return Landing{r.data + h.offset, nullptr, r.request};
  }
  auto [entry, fresh] = unexpected_.try_emplace(key);
  if (fresh) {
    entry->second.total = h.total;
    entry->second.signature = h.signature;
  } else if (entry->second.total != h.total || entry->second.signature != h.signature) {
    return std::nullopt;
  }
  auto piece = std::make_shared<std::vector<std::byte>>(h.length);
  return Landing{piece->data(), piece, nullptr};
}

void Matcher::landed(int peer, const FragmentHeader& h, const Landing& landing) {
  const Key key{peer, h.tag};
  if (landing.request) {
    account(key, landing.request, h.length);
    return;
  }
  if (!landing.piece) return;  // discarded
  // The receive may have been posted while this piece was on its way in.
  if (auto it = posted_.find(key); it != posted_.end()) {
    std::copy(landing.piece->begin(), landing.piece->end(), it->second.data + h.offset);
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
  const auto landing = land(peer, h);
  if (!landing) return false;
  if (landing->target != nullptr && !payload.empty()) {
    std::memcpy(landing->target, payload.data(), payload.size());
  }
  landed(peer, h, *landing);
  return true;
}

bool Matcher::post(int peer, std::uint64_t tag, std::uint32_t signature,
                   std::span<std::byte> buffer, const CompletionPtr& request) {
  const Key key{peer, tag};
  Posted r{request, buffer.data(), buffer.size(), signature, 0};
  if (const auto op = operation_of(tag)) {
    posted_operation_[peer] = {*op, signature};
    const auto arrived = arrived_operation_.find(peer);
    if (arrived != arrived_operation_.end() && arrived->second.id == *op &&
        arrived->second.signature != signature) {
      request->complete(HM_ERR_MISMATCH,
                        mismatch(peer, r.size, arrived->second.signature, r.size, signature));
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
    for (const auto& [offset, bytes] : u.pieces) {
      std::copy(bytes->begin(), bytes->end(), r.data + offset);
    }
    r.received = u.received;
    unexpected_.erase(it);
    if (r.received == r.size) {
      request->complete();
      return true;
    }
  }
  posted_.emplace(key, r);
  return false;
}

void Matcher::account(const Key& key, const CompletionPtr& request, std::size_t bytes) {
  auto it = posted_.find(key);
  if (it == posted_.end() || it->second.request != request) return;
  it->second.received += bytes;
  if (it->second.received == it->second.size) {
    // `request` may refer to the entry itself: keep the completion alive past the erase.
    const CompletionPtr done = it->second.request;
    posted_.erase(it);
    done->complete();
  }
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
