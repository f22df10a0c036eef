// Cuts one tagged message into the pieces that fit a receive slot: consecutive, in order, each
// at most `capacity` bytes, together covering [0, total). An empty message is one empty piece,
// so that it still travels and completes its receive.
#pragma once

#include <algorithm>
#include <cstdint>

namespace holmes::verbs {

class MessageCutter {
 public:
  struct Piece {
    std::uint64_t offset = 0;
    std::uint64_t length = 0;
  };

  // `capacity` >= 1: payload bytes one slot holds after the header.
  MessageCutter(std::uint64_t total, std::uint64_t capacity)
      : total_(total), capacity_(std::max<std::uint64_t>(capacity, 1)) {}

  bool done() const { return started_ && offset_ >= total_; }

  // The next piece; only while !done().
  Piece next() {
    started_ = true;
    const Piece piece{offset_, std::min(capacity_, total_ - offset_)};
    offset_ += piece.length;
    return piece;
  }

  std::uint64_t total() const { return total_; }

 private:
  std::uint64_t total_;
  std::uint64_t capacity_;
  std::uint64_t offset_ = 0;
  bool started_ = false;
};

}  // namespace holmes::verbs
