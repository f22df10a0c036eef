// Recursive doubling and recursive halving/doubling (Rabenseifner) allreduce, for small and
// medium messages where the ring's 2(n-1) steps cost more than its bandwidth saves.
//
// Both work on the largest power of two p of ranks. With n = p + rem, the first 2*rem ranks
// pair up first: each even one hands its data to the odd one above it and waits for the result
// (the "fold"), so p ranks remain. Every reduction of two partners' data puts the lower rank's
// operand first, so both partners compute the same bits and the result is identical everywhere.
#include <vector>

#include "collectives/algorithms.hpp"
#include "collectives/pipeline.hpp"
#include "core/dtype.hpp"

namespace holmes {
namespace {

// The fold around a power-of-two core: which ranks take part and under which number.
struct Fold {
  Fold(int n, int r) : p2(floor_power_of_two(n)), rem(n - p2), rank(r) {
    if (r < 2 * rem) {
      virtual_rank = r % 2 == 1 ? r / 2 : -1;
    } else {
      virtual_rank = r - rem;
    }
  }
  // The real rank of virtual rank v.
  int real(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
  bool folded_out() const { return virtual_rank < 0; }
  bool takes_partner() const { return rank < 2 * rem && rank % 2 == 1; }

  int p2;
  int rem;
  int rank;
  int virtual_rank;
};

// Step 0: even ranks below 2*rem hand their data to the odd rank above, which reduces it
// (lower rank first). `data` holds this rank's contribution; `temp` is scratch of the same size.
void fold_in(CollectiveContext& ctx, const Fold& fold, std::byte* data, std::byte* temp,
             std::size_t count, hm_dtype_t dtype, hm_op_t op) {
  const std::size_t bytes = count * dtype_size(dtype);
  std::vector<Transfer> transfers;
  if (fold.folded_out()) {
    send_chunked(ctx, fold.rank + 1, 0, data, bytes, transfers);
    ctx.wait_all(transfers);
  } else if (fold.takes_partner()) {
    recv_chunked(ctx, fold.rank - 1, 0, temp, bytes, transfers);
    ctx.wait_all(transfers);
    ctx.reduce(dtype, op, data, temp, data, count);
  }
}

// The last step: the odd ranks hand the result back to their even partner.
void fold_out(CollectiveContext& ctx, const Fold& fold, std::uint64_t round, std::byte* data,
              std::size_t bytes) {
  std::vector<Transfer> transfers;
  if (fold.folded_out()) {
    recv_chunked(ctx, fold.rank + 1, round, data, bytes, transfers);
  } else if (fold.takes_partner()) {
    send_chunked(ctx, fold.rank - 1, round, data, bytes, transfers);
  }
  ctx.wait_all(transfers);
}

}  // namespace

void recursive_doubling_allreduce(CollectiveContext& ctx, const void* send, void* recv,
                                  std::size_t count, hm_dtype_t dtype, hm_op_t op,
                                  int average_over) {
  const std::size_t es = dtype_size(dtype);
  const std::size_t bytes = count * es;
  auto* out = static_cast<std::byte*>(recv);
  ctx.copy(out, send, bytes);
  const int n = ctx.size();
  if (n > 1 && count > 0) {
    const Fold fold(n, ctx.rank());
    std::byte* temp = ctx.scratch(bytes);
    fold_in(ctx, fold, out, temp, count, dtype, op);
    std::uint64_t round = 1;
    if (!fold.folded_out()) {
      for (int mask = 1; mask < fold.p2; mask <<= 1, ++round) {
        const int partner_virtual = fold.virtual_rank ^ mask;
        const int partner = fold.real(partner_virtual);
        std::vector<Transfer> transfers;
        recv_chunked(ctx, partner, round, temp, bytes, transfers);
        send_chunked(ctx, partner, round, out, bytes, transfers);
        ctx.wait_all(transfers);
        if (partner_virtual < fold.virtual_rank) {
          ctx.reduce(dtype, op, out, temp, out, count);
        } else {
          ctx.reduce(dtype, op, out, out, temp, count);
        }
      }
      if (op == HM_AVG && average_over > 1) ctx.finalize_average(dtype, out, count, average_over);
    } else {
      round = 1 + static_cast<std::uint64_t>(ceil_log2(fold.p2));
    }
    fold_out(ctx, fold, round, out, bytes);
    return;
  }
  if (op == HM_AVG && average_over > 1) ctx.finalize_average(dtype, out, count, average_over);
}

void halving_doubling_allreduce(CollectiveContext& ctx, const void* send, void* recv,
                                std::size_t count, hm_dtype_t dtype, hm_op_t op, int average_over) {
  const std::size_t es = dtype_size(dtype);
  const std::size_t bytes = count * es;
  auto* out = static_cast<std::byte*>(recv);
  ctx.copy(out, send, bytes);
  const int n = ctx.size();
  if (n == 1 || count == 0) {
    if (op == HM_AVG && average_over > 1) ctx.finalize_average(dtype, out, count, average_over);
    return;
  }
  const Fold fold(n, ctx.rank());
  std::byte* temp = ctx.scratch(bytes);
  fold_in(ctx, fold, out, temp, count, dtype, op);
  const int log_p2 = ceil_log2(fold.p2);
  if (!fold.folded_out()) {
    const int v = fold.virtual_rank;
    // p2 blocks; block k starts at offset(k) elements.
    const BlockLayout blocks(count, fold.p2, count);
    auto offset = [&](int k) { return k < fold.p2 ? blocks.block_start(k) : count; };
    // Reduce-scatter by recursive halving: keep the half of the current range on our side of
    // the partner, send the other half; at the end virtual rank v holds block v reduced.
    int lo = 0;
    int hi = fold.p2;
    std::uint64_t round = 1;
    for (int mask = fold.p2 / 2; mask >= 1; mask >>= 1, ++round) {
      const int partner_virtual = v ^ mask;
      const int partner = fold.real(partner_virtual);
      const int mid = lo + (hi - lo) / 2;
      const bool keep_low = (v & mask) == 0;
      const int keep_lo = keep_low ? lo : mid;
      const int keep_hi = keep_low ? mid : hi;
      const int give_lo = keep_low ? mid : lo;
      const int give_hi = keep_low ? hi : mid;
      const std::size_t keep_at = offset(keep_lo);
      const std::size_t keep_count = offset(keep_hi) - keep_at;
      const std::size_t give_at = offset(give_lo);
      const std::size_t give_count = offset(give_hi) - give_at;
      std::vector<Transfer> transfers;
      recv_chunked(ctx, partner, round, temp + keep_at * es, keep_count * es, transfers);
      send_chunked(ctx, partner, round, out + give_at * es, give_count * es, transfers);
      ctx.wait_all(transfers);
      std::byte* mine = out + keep_at * es;
      const std::byte* theirs = temp + keep_at * es;
      if (partner_virtual < v) {
        ctx.reduce(dtype, op, mine, theirs, mine, keep_count);
      } else {
        ctx.reduce(dtype, op, mine, mine, theirs, keep_count);
      }
      lo = keep_lo;
      hi = keep_hi;
    }
    if (op == HM_AVG && average_over > 1) {
      ctx.finalize_average(dtype, out + offset(lo) * es, offset(hi) - offset(lo), average_over);
    }
    // Allgather by recursive doubling: exchange the ranges gathered so far.
    for (int mask = 1; mask < fold.p2; mask <<= 1, ++round) {
      const int partner_virtual = v ^ mask;
      const int partner = fold.real(partner_virtual);
      const int mine_lo = v & ~(mask - 1);
      const int theirs_lo = partner_virtual & ~(mask - 1);
      std::vector<Transfer> transfers;
      recv_chunked(ctx, partner, round, out + offset(theirs_lo) * es,
                   (offset(theirs_lo + mask) - offset(theirs_lo)) * es, transfers);
      send_chunked(ctx, partner, round, out + offset(mine_lo) * es,
                   (offset(mine_lo + mask) - offset(mine_lo)) * es, transfers);
      ctx.wait_all(transfers);
    }
  }
  fold_out(ctx, fold, 1 + 2 * static_cast<std::uint64_t>(log_p2), out, bytes);
}

}  // namespace holmes
