#include "transports/shm/ring.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace holmes::shm {
namespace {

// Per-record payload: large enough that a wakeup and a header are noise next to the copy, small
// enough to stay in cache and to let the consumer copy one fragment out while the producer
// writes the next.
constexpr std::uint64_t kFragmentBytes = 256u << 10;

}  // namespace

RingWriter::RingWriter(RingControl& control, std::byte* data, std::uint64_t bytes)
    : control_(control),
      data_(data),
      bytes_(bytes),
      max_payload_(std::min<std::uint64_t>(kFragmentBytes, bytes / 4 - kRecordHeaderBytes)),
      head_(load_relaxed(control.head)) {}

std::optional<std::uint64_t> RingWriter::free_bytes() {
  const std::uint64_t tail = load_acquire(control_.tail);
  if (tail > head_ || head_ - tail > bytes_ || tail % kCacheLine != 0) return std::nullopt;
  return bytes_ - (head_ - tail);
}

bool RingWriter::fits(std::uint64_t payload) {
  const auto free = free_bytes();
  if (!free) return true;  // let write() report the corruption
  const std::uint64_t need = record_bytes(payload);
  const std::uint64_t to_end = bytes_ - (head_ & (bytes_ - 1));
  return *free >= (to_end < need ? to_end + need : need);
}

RingWriter::Result RingWriter::write(const RecordHeader& header,
                                     std::span<const std::byte> payload) {
  const auto free = free_bytes();
  if (!free) return Result::kCorrupt;
  const std::uint64_t need = record_bytes(payload.size());
  std::uint64_t to_end = bytes_ - (head_ & (bytes_ - 1));
  if (*free < (to_end < need ? to_end + need : need)) return Result::kFull;
  if (to_end < need) {
    RecordHeader pad{};
    pad.kind = static_cast<std::uint32_t>(RecordKind::kPad);
    std::memcpy(data_ + (head_ & (bytes_ - 1)), &pad, sizeof(pad));
    head_ += to_end;
  }
  std::byte* at = data_ + (head_ & (bytes_ - 1));
  std::memcpy(at, &header, sizeof(header));
  if (!payload.empty()) std::memcpy(at + kRecordHeaderBytes, payload.data(), payload.size());
  head_ += need;
  store_release(control_.head, head_);
  return Result::kWritten;
}

RingReader::RingReader(RingControl& control, std::byte* data, std::uint64_t bytes)
    : control_(control),
      data_(data),
      bytes_(bytes),
      tail_(load_relaxed(control.tail)),
      cursor_(tail_) {}

bool RingReader::drained() { return load_acquire(control_.head) == cursor_; }

std::optional<RingReader::Record> RingReader::next(std::string& corrupt) {
  const std::uint64_t head = load_acquire(control_.head);
  if (head == cursor_) return std::nullopt;
  // head may only grow, by whole records, and never past what the consumer has freed.
  if (head < cursor_ || head - tail_ > bytes_ || head % kCacheLine != 0) {
    corrupt = fmt::format(
        "ring head {} is impossible (read up to {}, freed up to {}, ring {} "
        "bytes)",
        head, cursor_, tail_, bytes_);
    return std::nullopt;
  }
  Record record;
  record.start = cursor_;
  std::uint64_t at = cursor_;
  for (;;) {
    const std::uint64_t available = head - at;
    if (available == 0) {
      corrupt = "a pad record is not followed by a record";
      return std::nullopt;
    }
    const std::uint64_t index = at & (bytes_ - 1);
    const std::uint64_t to_end = bytes_ - index;
    std::memcpy(&record.header, data_ + index, sizeof(RecordHeader));
    const auto kind = static_cast<RecordKind>(record.header.kind);
    if (kind == RecordKind::kPad) {
      if (to_end > available || record.start != at) {
        corrupt = "a pad record runs past the published data";
        return std::nullopt;
      }
      at += to_end;
      continue;
    }
    std::uint64_t payload = 0;
    if (kind == RecordKind::kData) {
      payload = record.header.length;
    } else if (kind != RecordKind::kRts) {
      corrupt = fmt::format("unknown record kind {:#010x}", record.header.kind);
      return std::nullopt;
    }
    if (payload > bytes_ || record_bytes(payload) > std::min(to_end, available)) {
      corrupt = fmt::format("a record of {} payload bytes runs past the ring", payload);
      return std::nullopt;
    }
    record.payload = {data_ + index + kRecordHeaderBytes, static_cast<std::size_t>(payload)};
    record.end = at + record_bytes(payload);
    cursor_ = record.end;
    return record;
  }
}

void RingReader::release(std::uint64_t position) {
  if (position <= tail_ || position > cursor_) return;
  tail_ = position;
  store_release(control_.tail, tail_);
}

}  // namespace holmes::shm
