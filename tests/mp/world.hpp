// Shared pieces of the multi-process tests. Each test binary runs as N ranks under holmes-run;
// every rank runs every test in the same order, so collectives inside tests line up. Checks use
// EXPECT (never a fatal ASSERT between collectives) so that a failing rank keeps calling the
// same collectives as the others instead of leaving them waiting.
#pragma once

#include <holmes/holmes.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace holmes::test {

// The world communicator, created before the first test and destroyed after the last.
Communicator& world();

// The counts every collective is tested with.
enum class CountCase { kZero, kOne, kSeven, kRanksMinusOne, kPrime, kLarge };
const char* count_case_name(CountCase c);
inline constexpr CountCase kAllCounts[] = {CountCase::kZero,  CountCase::kOne,
                                           CountCase::kSeven, CountCase::kRanksMinusOne,
                                           CountCase::kPrime, CountCase::kLarge};

// The count argument for a case. kLarge makes the largest buffer the call touches 16 MiB:
// `blocks` is how many count-sized blocks that buffer holds (ranks for reduce_scatter,
// allgather and alltoall, 1 otherwise).
std::size_t count_for(CountCase c, hm_dtype_t dtype, int ranks, std::size_t blocks);

// How buffers are passed: separate, in place (same pointer; for reduce_scatter and allgather the
// NCCL convention of the rank's own block), or for reduce_scatter/allgather the same pointer.
enum class Placement { kOutOfPlace, kInPlace, kSamePointer };
const char* placement_name(Placement p);

inline constexpr hm_dtype_t kAllDtypes[] = {HM_INT8,    HM_UINT8,  HM_INT32,   HM_UINT32,
                                            HM_INT64,   HM_UINT64, HM_FLOAT16, HM_BFLOAT16,
                                            HM_FLOAT32, HM_FLOAT64};
inline constexpr hm_op_t kAllOps[] = {HM_SUM, HM_PROD, HM_MIN, HM_MAX, HM_AVG};

// A varying pattern per test so that a stale buffer from an earlier test cannot pass.
unsigned salt_of(int a, int b, int c, int d);

// Bytes of `count` elements, filled with a marker that no check value equals.
std::vector<std::byte> garbage(std::size_t count, hm_dtype_t dtype);

// FNV-1a of a buffer, for comparing results across ranks.
std::uint64_t fingerprint(const void* data, std::size_t bytes);

// Every rank's value of x, gathered to all (through the world communicator).
std::vector<std::uint64_t> gather_all(std::uint64_t x);

}  // namespace holmes::test
