// The bytes of a shm segment, shared by every process that maps it.
//
// One segment per endpoint (the receiver): a header page, the owner's board (where it publishes
// the buffer of a small collective for every peer to read, shared_board.hpp), then one ring per
// rank of the communicator. Ring `s` is written only by rank `s` (single producer) and read only
// by the owner (single consumer). Untouched ring pages cost nothing until used, but the whole
// segment is reserved with posix_fallocate so that a full /dev/shm is an error at creation instead
// of a SIGBUS in the middle of a collective.
//
//   [SegmentHeader, 4 KiB][board: 2 slots][RingControl 4 KiB][ring 0 data]...[ring n-1 data]
//
// Everything here is read by processes that must not trust each other completely: fields are
// plain integers read through std::atomic_ref (an object in shared memory has no C++ lifetime in
// the other process), every size is checked before use, and a reader copies what it checked
// instead of reading it twice.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace holmes::shm {

// "HOLMESHM" read as a little-endian 64-bit number.
inline constexpr std::uint64_t kSegmentMagic = 0x4d4853454d4c4f48ull;
inline constexpr std::uint32_t kLayoutVersion = 3;
inline constexpr std::size_t kPageBytes = 4096;
inline constexpr std::size_t kHeaderBytes = kPageBytes;
inline constexpr std::size_t kRingControlBytes = kPageBytes;
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kMacBytes = 32;

// The board: two slots (rounds alternate between them), each a header line and the data.
inline constexpr std::size_t kBoardSlotBytes = 16u << 10;
inline constexpr std::size_t kBoardSlotStride = kCacheLine + kBoardSlotBytes;
inline constexpr std::size_t kBoardOffset = kHeaderBytes;
inline constexpr std::size_t kBoardBytes =
    (2 * kBoardSlotStride + kPageBytes - 1) / kPageBytes * kPageBytes;
inline constexpr std::size_t kRingsOffset = kBoardOffset + kBoardBytes;

// Room for the reason an endpoint gives when it closes.
inline constexpr std::size_t kCloseReasonBytes = 1024;

// RTS messages a producer may have outstanding with one consumer.
inline constexpr std::size_t kAckSlots = 64;

// Ring data sizes a segment may declare; anything else is refused.
inline constexpr std::uint64_t kMinRingBytes = 64u << 10;
inline constexpr std::uint64_t kMaxRingBytes = 256u << 20;
// The largest communicator a segment may describe (bounds the mapping a peer can make us do).
inline constexpr std::uint32_t kMaxRings = 1u << 16;

enum class SegmentState : std::uint32_t {
  kCreated = 0,  // the owner does not know its communicator yet (before set_peers)
  kReady = 1,    // layout below is final and the rings may be attached
};

// Whether the consumer can read the producer's memory directly (process_vm_readv).
enum class CmaState : std::uint32_t { kUnknown = 0, kWorks = 1, kRefused = 2 };

struct alignas(kCacheLine) SegmentHeader {
  // Set at creation, before the name is published.
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t header_bytes;
  std::int32_t owner_pid;
  std::uint32_t reserved0;
  std::uint64_t owner_pid_namespace;  // inode of /proc/self/ns/pid; 0 when unknown
  std::uint64_t context_hash;         // FNV-1a of the communicator context
  std::uint8_t owner_nonce[kNonceBytes];

  // Published by set_peers: written first, then `state` = kReady with release order.
  std::uint32_t state;  // SegmentState
  std::int32_t owner_rank;
  std::uint32_t ring_count;  // the communicator size: one ring slot per rank
  std::uint32_t reserved1;
  std::uint64_t ring_bytes;           // data bytes per ring, a power of two
  std::uint64_t ring_stride;          // kRingControlBytes + ring_bytes
  std::uint64_t rings_offset;         // kRingsOffset
  std::uint64_t total_bytes;          // kRingsOffset + ring_count * ring_stride
  std::uint8_t owner_mac[kMacBytes];  // proves the owner holds the job token

  // Set when the owner shuts down: nothing it has not consumed yet will be read. Before that it
  // writes why (an hm_status_t and a NUL-terminated text), so that a peer waiting for it can
  // report the cause rather than only the closing (read as untrusted bytes).
  alignas(kCacheLine) std::uint32_t closed;
  std::uint32_t closed_status;
  char closed_reason[kCloseReasonBytes];
  // Futex word the owner's progress thread sleeps on; anyone with news for it bumps it.
  alignas(kCacheLine) std::uint32_t doorbell;
  std::uint32_t sleeping;  // 1 while the owner is (about to be) asleep: ring it with a wake
  // How many of the owner's threads are polling its rings themselves (waiters that do the
  // progress thread's work): while any are, a peer's news needs no wake system call.
  std::uint32_t polling;
};
static_assert(sizeof(SegmentHeader) <= kHeaderBytes);
static_assert(std::is_trivially_copyable_v<SegmentHeader>);

struct alignas(kCacheLine) RingControl {
  // Producer's line.
  std::uint64_t head;              // bytes ever published
  std::uint32_t closed;            // the producer will write nothing more
  std::uint32_t producer_waiting;  // the producer waits for space: ring its doorbell after a read

  // Written once by the producer when it attaches, then `attached` = 1 with release order.
  alignas(kCacheLine) std::uint32_t attached;
  std::int32_t producer_pid;
  std::uint64_t producer_pid_namespace;
  std::uint8_t producer_nonce[kNonceBytes];
  std::uint8_t producer_mac[kMacBytes];  // proves the producer holds the job token
  std::uint64_t cma_probe_address;       // a word in the producer's memory ...
  std::uint64_t cma_probe_value;         // ... holding this value, to test process_vm_readv

  // Consumer's line.
  alignas(kCacheLine) std::uint64_t tail;  // bytes ever consumed
  std::uint32_t cma;                       // CmaState, decided by the consumer

  // The consumer acknowledges RTS message `cookie` (it has read it, or refused it) by writing
  // the cookie into rts_acked[cookie % kAckSlots]. Messages may be read in any order (each when
  // its receive is posted), and the producer never has more than kAckSlots of them outstanding.
  alignas(kCacheLine) std::uint64_t rts_acked[kAckSlots];
};
static_assert(sizeof(RingControl) <= kRingControlBytes);
static_assert(std::is_trivially_copyable_v<RingControl>);

// The line before each board slot's data, written by the owner only: the data, then `bytes`,
// `signature`, `root` and `sequence`, then `round` with release order (readers load it with acquire
// and read the rest only when it names the round they wait for). `waiters` counts peers asleep on
// `round_word` (the low half of `round`, for the futex), to be woken when it changes.
struct alignas(kCacheLine) BoardSlotHeader {
  std::uint64_t round;     // 1, 2, 3 ... (0: never published); slot = round % 2
  std::uint64_t sequence;  // the communicator's operation number
  std::uint32_t signature;
  std::uint32_t bytes;
  std::uint32_t round_word;
  std::uint32_t waiters;
  std::int32_t root;  // -1: not a rooted collective
};
static_assert(sizeof(BoardSlotHeader) <= kCacheLine);
static_assert(std::is_trivially_copyable_v<BoardSlotHeader>);

enum class RecordKind : std::uint32_t {
  kData = 0x41544144,  // "DATA": a fragment of a message, payload follows
  kPad = 0x44444150,   // "PADD": skip to the end of the ring (records never wrap)
  kRts = 0x20535452,   // "RTS ": a whole message the consumer reads from the producer (CMA);
                       // it answers in RingControl::rts_acked
};

// Every record starts on a 64-byte boundary with this header; a record takes
// kRecordHeaderBytes + payload rounded up to 64 bytes.
struct RecordHeader {
  std::uint32_t kind;  // RecordKind
  std::uint32_t signature;
  std::uint64_t tag;
  std::uint64_t total;    // bytes of the whole message
  std::uint64_t offset;   // kData: where this payload goes in the message
  std::uint64_t length;   // kData: payload bytes; kRts: == total
  std::uint64_t address;  // kRts: the message in the producer's memory
  std::uint64_t cookie;   // kRts: 1, 2, 3 ... in ring order
};
inline constexpr std::size_t kRecordHeaderBytes = 64;
static_assert(sizeof(RecordHeader) <= kRecordHeaderBytes);
static_assert(std::is_trivially_copyable_v<RecordHeader>);

// Messages are capped like everywhere else in Holmes (2^48 bytes); larger claims are hostile.
inline constexpr std::uint64_t kMaxMessageBytes = 1ull << 48;

constexpr std::uint64_t round_up(std::uint64_t value, std::uint64_t to) {
  return (value + to - 1) / to * to;
}

// Bytes a record with `payload` bytes occupies in a ring.
constexpr std::uint64_t record_bytes(std::uint64_t payload) {
  return kRecordHeaderBytes + round_up(payload, kCacheLine);
}

// Shared-memory atomics on plain fields.
template <typename T>
T load_acquire(T& field) {
  return std::atomic_ref<T>(field).load(std::memory_order_acquire);
}
template <typename T>
void store_release(T& field, T value) {
  std::atomic_ref<T>(field).store(value, std::memory_order_release);
}
template <typename T>
T load_relaxed(T& field) {
  return std::atomic_ref<T>(field).load(std::memory_order_relaxed);
}
static_assert(std::atomic_ref<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free);

}  // namespace holmes::shm
