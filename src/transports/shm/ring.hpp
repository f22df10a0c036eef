// One single-producer/single-consumer ring in shared memory: the producer appends records
// (header + payload, 64-byte aligned, never wrapping: a pad record skips the end of the ring),
// publishes them by moving `head` with release order, and the consumer reads them and frees their
// space by moving `tail`. Each side keeps its own position locally and only reads the other's.
//
// The consumer trusts nothing the producer wrote: `head`, every record's kind and length are
// checked against the ring's bounds before anything is read, and the header is copied out once
// so that a producer changing it concurrently cannot make the consumer read past the ring.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "transports/shm/layout.hpp"

namespace holmes::shm {

class RingWriter {
 public:
  RingWriter(RingControl& control, std::byte* data, std::uint64_t bytes);

  enum class Result { kWritten, kFull, kCorrupt };
  // Appends one record (and publishes it) when it fits now. kCorrupt: the consumer's `tail` is
  // impossible, the ring cannot be used any more.
  Result write(const RecordHeader& header, std::span<const std::byte> payload);

  // The largest payload one record may carry (a quarter of the ring, so several are in flight).
  std::uint64_t max_payload() const { return max_payload_; }

  // Whether a record of `payload` bytes fits now.
  bool fits(std::uint64_t payload);

  RingControl& control() const { return control_; }

 private:
  // Free bytes, or nullopt when the consumer's tail is impossible.
  std::optional<std::uint64_t> free_bytes();

  RingControl& control_;
  std::byte* data_;
  std::uint64_t bytes_;
  std::uint64_t max_payload_;
  std::uint64_t head_;
};

// Reads records in order but may free their space out of order: a record whose receive is not
// posted yet can stay in the ring (and be copied once, straight into the receive buffer, when
// it is) while later records are read. Space is freed up to a position, by the caller, once
// everything before it is done with.
class RingReader {
 public:
  RingReader(RingControl& control, std::byte* data, std::uint64_t bytes);

  struct Record {
    RecordHeader header;                 // a private copy
    std::span<const std::byte> payload;  // inside the ring, valid until released
    std::uint64_t start = 0;             // where it (and a pad before it) begins in the ring
    std::uint64_t end = 0;               // where the next record begins
  };
  // The next unread record, or nullopt when there is none. On a malformed ring returns nullopt
  // and sets `corrupt` to what is wrong (the ring must not be read again).
  std::optional<Record> next(std::string& corrupt);
  // Frees the ring up to `position` (a record's end) for the producer, with release order.
  void release(std::uint64_t position);

  // Everything published has been read (not necessarily released).
  bool drained();
  // Position of the next unread record, and how far the ring has been freed.
  std::uint64_t cursor() const { return cursor_; }
  std::uint64_t released() const { return tail_; }
  std::uint64_t bytes() const { return bytes_; }
  RingControl& control() const { return control_; }

 private:
  RingControl& control_;
  std::byte* data_;
  std::uint64_t bytes_;
  std::uint64_t tail_;    // released
  std::uint64_t cursor_;  // read
};

}  // namespace holmes::shm
