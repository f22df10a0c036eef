// The bytes a tcp connection's reader has taken from the socket and not yet handled. A read
// asks for up to kBytes at once, so a small frame's header and payload (and the frames behind
// it) come in one system call instead of one for the header and one for the payload; a payload
// that goes beyond the inbox is read straight into its destination (the inbox gives up what it
// holds of it first), so large messages are not copied twice.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "transports/tcp/frame.hpp"

namespace holmes::tcp {

class Inbox {
 public:
  static constexpr std::size_t kBytes = 4096;

  // Bytes held, not yet taken.
  std::size_t size() const { return end_ - begin_; }

  // Moves the held bytes to the front, so that free_space() is as large as it can be.
  void compact() {
    if (begin_ == 0) return;
    std::memmove(bytes_.data(), bytes_.data() + begin_, size());
    end_ -= begin_;
    begin_ = 0;
  }
  // Where the next read may write; filled(n) once it wrote n bytes there.
  std::span<std::uint8_t> free_space() { return {bytes_.data() + end_, kBytes - end_}; }
  void filled(std::size_t n) { end_ += n; }

  // The next frame header's bytes, taken. Requires size() >= kFrameHeaderBytes.
  std::span<const std::uint8_t, kFrameHeaderBytes> take_header() {
    const std::span<const std::uint8_t, kFrameHeaderBytes> header(bytes_.data() + begin_,
                                                                  kFrameHeaderBytes);
    begin_ += kFrameHeaderBytes;
    return header;
  }
  // Copies up to out.size() held bytes to `out`; returns how many.
  std::size_t take(std::span<std::byte> out) {
    const std::size_t n = skip(out.size());
    if (n > 0) std::memcpy(out.data(), bytes_.data() + begin_ - n, n);
    return n;
  }
  // Drops up to `n` held bytes; returns how many.
  std::size_t skip(std::size_t n) {
    n = n < size() ? n : size();
    begin_ += n;
    return n;
  }

 private:
  std::array<std::uint8_t, kBytes> bytes_{};
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

}  // namespace holmes::tcp
