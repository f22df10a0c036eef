// Shared pieces of the multi-process tests. Each test binary runs as N ranks under holmes-run;
// every rank runs every test in the same order, so collectives inside tests line up. Checks use
// EXPECT (never a fatal ASSERT between collectives) so that a failing rank keeps calling the
// same collectives as the others instead of leaving them waiting.
#pragma once

#include <holmes/holmes.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <tuple>
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

// How much of the matrix runs. Every combination of dtype, op and placement runs at the small
// counts, where the cases differ in their edges (empty, one element, fewer elements than ranks,
// uneven blocks). At kLarge (16 MiB, the segmented, pipelined and CMA paths) `make test` runs a
// covering set instead of the product, because the product is nine tenths of the suite's time
// and the same code at another dtype or op: each dtype once, with the op and the placement
// rotating with it, so every op and every placement meets the large path (the reduction kernels
// themselves get every dtype x op in unit.Reduce*). HOLMES_TEST_MATRIX=full, which the tests
// labelled long set (make test-long), runs the whole product at kLarge too.
bool full_matrix();

// Whether the large case of the dtype at `dtype_index` in kAllDtypes runs with the op at
// `op_index` (of `ops`) and the placement at `placement_index` (of `placements`): always in the
// full matrix; in the quick one only the dtype's own combination (index modulo each list).
bool large_case_runs(std::size_t dtype_index, std::size_t op_index, std::size_t ops,
                     std::size_t placement_index, std::size_t placements);

// The parameters of the reduction tests (allreduce, reduce_scatter, reduce) and of the data
// movement tests (no op): every dtype x count x placement, kLarge as large_case_runs says.
using ReductionParam = std::tuple<hm_dtype_t, hm_op_t, CountCase, Placement>;
using MoveParam = std::tuple<hm_dtype_t, CountCase, Placement>;
std::vector<ReductionParam> reduction_matrix(std::span<const Placement> placements);
std::vector<MoveParam> move_matrix(std::span<const Placement> placements);

// A varying pattern per test so that a stale buffer from an earlier test cannot pass.
unsigned salt_of(int a, int b, int c, int d);

// Bytes of `count` elements, filled with a marker that no check value equals.
std::vector<std::byte> garbage(std::size_t count, hm_dtype_t dtype);

// FNV-1a of a buffer, for comparing results across ranks.
std::uint64_t fingerprint(const void* data, std::size_t bytes);

// Every rank's value of x, gathered to all (through the world communicator).
std::vector<std::uint64_t> gather_all(std::uint64_t x);

}  // namespace holmes::test
