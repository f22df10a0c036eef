// allreduce, reduce_scatter and reduce: every dtype x op x count x placement, checked exactly
// against expected values computed here (check_data: inputs whose reductions are exact).
#include <gtest/gtest.h>

#include <cstring>
#include <tuple>

#include "check_data.hpp"
#include "core/dtype.hpp"
#include "world.hpp"

namespace holmes::test {
namespace {

using check::count_wrong;
using check::fill_expected;
using check::fill_input;

std::string reduction_name(const ::testing::TestParamInfo<ReductionParam>& info) {
  const auto [dtype, op, count, placement] = info.param;
  return std::string(dtype_name(dtype)) + "_" + op_name(op) + "_" + count_case_name(count) + "_" +
         placement_name(placement);
}

constexpr Placement kAllreducePlacements[] = {Placement::kOutOfPlace, Placement::kInPlace};
class AllreduceTest : public ::testing::TestWithParam<ReductionParam> {};

TEST_P(AllreduceTest, MatchesExactReduction) {
  const auto [dtype, op, count_case, placement] = GetParam();
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  const std::size_t count = count_for(count_case, dtype, n, 1);
  const std::size_t es = dtype_size(dtype);
  const unsigned salt = salt_of(dtype, op, static_cast<int>(count_case), 1);
  std::vector<std::byte> send(count * es);
  fill_input(send.data(), dtype, op, r, 0, count, salt);
  const std::vector<std::byte> original = send;
  std::vector<std::byte> expected(count * es);
  fill_expected(expected.data(), dtype, op, n, 0, count, salt);
  if (placement == Placement::kInPlace) {
    comm.allreduce(send.data(), send.data(), count, dtype, op);
    EXPECT_EQ(count_wrong(send.data(), expected.data(), count, dtype), 0u);
  } else {
    auto recv = garbage(count, dtype);
    comm.allreduce(send.data(), recv.data(), count, dtype, op);
    EXPECT_EQ(count_wrong(recv.data(), expected.data(), count, dtype), 0u);
    EXPECT_EQ(send, original) << "allreduce modified its send buffer";
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, AllreduceTest,
                         ::testing::ValuesIn(reduction_matrix(kAllreducePlacements)),
                         reduction_name);

constexpr Placement kReduceScatterPlacements[] = {Placement::kOutOfPlace, Placement::kInPlace,
                                                  Placement::kSamePointer};
class ReduceScatterTest : public ::testing::TestWithParam<ReductionParam> {};

TEST_P(ReduceScatterTest, EachRankGetsItsBlockReduced) {
  const auto [dtype, op, count_case, placement] = GetParam();
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  const auto nn = static_cast<std::size_t>(n);
  const std::size_t count = count_for(count_case, dtype, n, nn);  // per rank
  const std::size_t es = dtype_size(dtype);
  const unsigned salt = salt_of(dtype, op, static_cast<int>(count_case), 2);
  std::vector<std::byte> send(nn * count * es);
  fill_input(send.data(), dtype, op, r, 0, nn * count, salt);
  std::vector<std::byte> expected(count * es);
  fill_expected(expected.data(), dtype, op, n, static_cast<std::size_t>(r) * count, count, salt);
  switch (placement) {
    case Placement::kOutOfPlace: {
      auto recv = garbage(count, dtype);
      comm.reduce_scatter(send.data(), recv.data(), count, dtype, op);
      EXPECT_EQ(count_wrong(recv.data(), expected.data(), count, dtype), 0u);
      break;
    }
    case Placement::kInPlace: {  // NCCL: recv is this rank's block of send
      std::byte* mine = send.data() + static_cast<std::size_t>(r) * count * es;
      comm.reduce_scatter(send.data(), mine, count, dtype, op);
      EXPECT_EQ(count_wrong(mine, expected.data(), count, dtype), 0u);
      break;
    }
    case Placement::kSamePointer: {  // MPI: the result lands at the start of the buffer
      comm.reduce_scatter(send.data(), send.data(), count, dtype, op);
      EXPECT_EQ(count_wrong(send.data(), expected.data(), count, dtype), 0u);
      break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, ReduceScatterTest,
                         ::testing::ValuesIn(reduction_matrix(kReduceScatterPlacements)),
                         reduction_name);

constexpr Placement kReducePlacements[] = {Placement::kOutOfPlace, Placement::kInPlace};
class ReduceTest : public ::testing::TestWithParam<ReductionParam> {};

TEST_P(ReduceTest, RootGetsReductionOthersUntouched) {
  const auto [dtype, op, count_case, placement] = GetParam();
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  const std::size_t count = count_for(count_case, dtype, n, 1);
  const std::size_t es = dtype_size(dtype);
  const unsigned salt = salt_of(dtype, op, static_cast<int>(count_case), 3);
  // A root other than 0 where there is one, varying with the case.
  const int root = (static_cast<int>(count_case) + 1) % n;
  std::vector<std::byte> send(count * es);
  fill_input(send.data(), dtype, op, r, 0, count, salt);
  std::vector<std::byte> expected(count * es);
  fill_expected(expected.data(), dtype, op, n, 0, count, salt);
  if (placement == Placement::kInPlace) {
    const std::vector<std::byte> original = send;
    comm.reduce(send.data(), send.data(), count, dtype, op, root);
    if (r == root) {
      EXPECT_EQ(count_wrong(send.data(), expected.data(), count, dtype), 0u);
    } else {
      EXPECT_EQ(send, original) << "reduce changed a non-root's buffer";
    }
  } else {
    auto recv = garbage(count, dtype);
    const auto untouched = recv;
    comm.reduce(send.data(), recv.data(), count, dtype, op, root);
    if (r == root) {
      EXPECT_EQ(count_wrong(recv.data(), expected.data(), count, dtype), 0u);
    } else {
      EXPECT_EQ(recv, untouched) << "reduce wrote a non-root's recv buffer";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, ReduceTest,
                         ::testing::ValuesIn(reduction_matrix(kReducePlacements)), reduction_name);

// Non-root ranks may pass NULL as recvbuf.
TEST(ReduceTest, NonRootMayPassNullRecv) {
  auto& comm = world();
  const int n = comm.size();
  std::vector<std::int32_t> send(100, comm.rank() + 1);
  std::vector<std::int32_t> recv(100, -1);
  comm.reduce(send.data(), comm.rank() == 0 ? recv.data() : nullptr, 100, HM_INT32, HM_SUM, 0);
  if (comm.rank() == 0) {
    for (auto v : recv) EXPECT_EQ(v, n * (n + 1) / 2);
  }
}

}  // namespace
}  // namespace holmes::test
