// Helpers the chunked algorithms share: how a buffer splits into blocks and chunks, and a window
// that keeps the next few receives posted while the current chunk is reduced or forwarded.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "collectives/context.hpp"

namespace holmes {

// Powers of two around a rank count, for the logarithmic algorithms and their costs.
inline int floor_power_of_two(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}
inline int ceil_power_of_two(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}
inline int ceil_log2(int n) {
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  return rounds;
}

// Non-negative remainder: ring arithmetic on ranks.
inline int ring_mod(long long a, int n) {
  const long long m = a % n;
  return static_cast<int>(m < 0 ? m + n : m);
}

// `count` elements cut into `parts` blocks whose sizes differ by at most one (or into blocks given
// one by one), and every block cut into chunks of at most `chunk_elems` elements. Every rank
// computes the same layout.
class BlockLayout {
 public:
  struct Range {
    std::size_t offset;  // elements from the start of the whole buffer
    std::size_t count;   // may be 0
  };

  BlockLayout(std::size_t count, int parts, std::size_t chunk_elems)
      : chunk_elems_(std::max<std::size_t>(1, chunk_elems)) {
    const auto n = static_cast<std::size_t>(parts);
    for (std::size_t k = 0; k < n; ++k) {
      blocks_.push_back({k * (count / n) + std::min(k, count % n), count / n + (k < count % n)});
    }
    count_chunks();
  }
  BlockLayout(std::vector<Range> blocks, std::size_t chunk_elems)
      : blocks_(std::move(blocks)), chunk_elems_(std::max<std::size_t>(1, chunk_elems)) {
    count_chunks();
  }

  // The same blocks, cut into chunks of `chunk_elems` instead.
  BlockLayout rechunked(std::size_t chunk_elems) const { return BlockLayout(blocks_, chunk_elems); }

  int blocks() const { return static_cast<int>(blocks_.size()); }
  std::size_t block_start(int k) const { return blocks_[static_cast<std::size_t>(k)].offset; }
  std::size_t block_size(int k) const { return blocks_[static_cast<std::size_t>(k)].count; }
  // Chunks per block (the same for every block; trailing chunks of a short block are empty).
  std::size_t chunks() const { return chunks_; }
  // Elements per chunk.
  std::size_t chunk_elems() const { return chunk_elems_; }

  Range chunk(int block, std::size_t c) const {
    const std::size_t size = block_size(block);
    const std::size_t lo = std::min(size, c * chunk_elems_);
    const std::size_t hi = std::min(size, lo + chunk_elems_);
    return {block_start(block) + lo, hi - lo};
  }
  // The largest chunk of any block (scratch slots are this large).
  std::size_t max_chunk() const {
    std::size_t largest = 0;
    for (const auto& b : blocks_) largest = std::max(largest, b.count);
    return std::min(largest, chunk_elems_);
  }

 private:
  void count_chunks() {
    std::size_t largest = 0;
    for (const auto& b : blocks_) largest = std::max(largest, b.count);
    chunks_ = std::max<std::size_t>(1, (largest + chunk_elems_ - 1) / chunk_elems_);
  }

  std::vector<Range> blocks_;
  std::size_t chunk_elems_;
  std::size_t chunks_ = 1;
};

// Keeps up to `depth` receives posted ahead of the unit being consumed. Units are consumed in
// order 0, 1, 2, ...; post(u) starts unit u's receive, or returns nullopt when unit u has nothing
// to receive (an empty chunk). Unit u + depth is posted only after unit u was consumed, so a
// caller can give unit u a scratch slot u % depth.
class RecvWindow {
 public:
  using PostFn = std::function<std::optional<Transfer>(std::size_t unit)>;
  RecvWindow(CollectiveContext& ctx, std::size_t units, std::size_t depth, PostFn post)
      : ctx_(ctx), units_(units), depth_(depth), post_(std::move(post)), slots_(depth) {}

  // Waits for unit u; false when it had nothing to receive.
  bool wait(std::size_t unit) {
    while (next_ < units_ && next_ < unit + depth_) {
      slots_[next_ % depth_] = post_(next_);
      ++next_;
    }
    auto& slot = slots_[unit % depth_];
    if (!slot) return false;
    ctx_.wait(*slot);
    slot.reset();
    return true;
  }

 private:
  CollectiveContext& ctx_;
  std::size_t units_;
  std::size_t depth_;
  PostFn post_;
  std::vector<std::optional<Transfer>> slots_;
  std::size_t next_ = 0;
};

// Sends every non-empty chunk of `block` of `base` to `peer`, chunk c as step `first_step + c`,
// and keeps the transfers in `sends` (they are waited for at the end of the collective).
inline void send_block_chunks(CollectiveContext& ctx, int peer, const std::byte* base,
                              const BlockLayout& layout, int block, std::size_t element_size,
                              std::uint64_t first_step, std::vector<Transfer>& sends) {
  for (std::size_t c = 0; c < layout.chunks(); ++c) {
    const auto range = layout.chunk(block, c);
    if (range.count == 0) continue;
    sends.push_back(ctx.send(peer, first_step + c,
                             {base + range.offset * element_size, range.count * element_size}));
  }
}

// Receives posted ahead of the chunk being processed.
constexpr std::size_t kPipelineDepth = 4;
// Receives an allgather keeps posted ahead: each lands in the caller's buffer, so posting more
// costs no scratch, and a chunk that arrives before its receive costs a copy on the links that
// keep early messages aside (ucx, tcp).
constexpr std::size_t kGatherDepth = 64;

inline std::size_t chunk_elements(const CollectiveContext& ctx, std::size_t element_size) {
  return std::max<std::size_t>(1, ctx.chunk_bytes() / element_size);
}

// Scratch slots for received chunks: `kPipelineDepth` of them, each as large as the largest
// chunk of `layout` (small messages need far less than a whole chunk).
struct ScratchSlots {
  ScratchSlots(CollectiveContext& ctx, const BlockLayout& layout, std::size_t element_size)
      : slot_bytes(layout.max_chunk() * element_size),
        base(ctx.scratch(kPipelineDepth * slot_bytes)) {}
  // Slots at the start of scratch the caller already has (which may hold more after them).
  ScratchSlots(std::byte* scratch, const BlockLayout& layout, std::size_t element_size)
      : slot_bytes(layout.max_chunk() * element_size), base(scratch) {}
  std::byte* slot(std::size_t unit) const { return base + (unit % kPipelineDepth) * slot_bytes; }
  std::size_t slot_bytes;
  std::byte* base;
};

// Whole-buffer exchanges of the logarithmic algorithms (recursive doubling, trees): a buffer
// travels in chunks of the communicator's chunk size (so that device buffers stage through
// bounded pinned slots), chunk c of round k as step (k << kRoundShift) + c. Nothing is sent for
// an empty buffer; both ends compute the same sizes, so they agree on what to expect.
constexpr unsigned kRoundShift = 24;
inline void send_chunked(CollectiveContext& ctx, int peer, std::uint64_t round,
                         const std::byte* data, std::size_t bytes, std::vector<Transfer>& out) {
  const std::size_t chunk = std::max<std::size_t>(1, ctx.chunk_bytes());
  for (std::size_t at = 0, c = 0; at < bytes; at += chunk, ++c) {
    out.push_back(
        ctx.send(peer, (round << kRoundShift) + c, {data + at, std::min(chunk, bytes - at)}));
  }
}
inline void recv_chunked(CollectiveContext& ctx, int peer, std::uint64_t round, std::byte* data,
                         std::size_t bytes, std::vector<Transfer>& out) {
  const std::size_t chunk = std::max<std::size_t>(1, ctx.chunk_bytes());
  for (std::size_t at = 0, c = 0; at < bytes; at += chunk, ++c) {
    out.push_back(
        ctx.recv(peer, (round << kRoundShift) + c, {data + at, std::min(chunk, bytes - at)}));
  }
}

// True when [a, a + a_len) and [b, b + b_len) share a byte.
inline bool overlaps(const void* a, std::size_t a_len, const void* b, std::size_t b_len) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a);
  const auto pb = reinterpret_cast<std::uintptr_t>(b);
  return a_len > 0 && b_len > 0 && pa < pb + b_len && pb < pa + a_len;
}

}  // namespace holmes
