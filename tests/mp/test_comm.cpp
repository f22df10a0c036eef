// Communicator behaviour beyond single collectives: split, nonblocking operations, and
// bitwise-identical results across ranks and runs.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "check_data.hpp"
#include "core/dtype.hpp"
#include "world.hpp"

namespace holmes::test {
namespace {

TEST(SplitTest, EvenAndOddRanksFormTwoCommunicators) {
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  Communicator half = comm.split(r % 2, r);
  ASSERT_TRUE(half.valid());
  const int expected_size = r % 2 == 0 ? (n + 1) / 2 : n / 2;
  EXPECT_EQ(half.size(), expected_size);
  EXPECT_EQ(half.rank(), r / 2);
  // A sum over the half sees only its members: world ranks r, r+2, r+4, ...
  std::int64_t mine = r;
  std::int64_t total = 0;
  half.allreduce(&mine, &total, 1, HM_INT64, HM_SUM);
  std::int64_t expected = 0;
  for (int i = r % 2; i < n; i += 2) expected += i;
  EXPECT_EQ(total, expected);
  // The world still works alongside it.
  std::int64_t world_total = 0;
  comm.allreduce(&mine, &world_total, 1, HM_INT64, HM_SUM);
  EXPECT_EQ(world_total, static_cast<std::int64_t>(n) * (n - 1) / 2);
}

TEST(SplitTest, KeyOrdersRanks) {
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  Communicator reversed = comm.split(0, n - r);  // larger world rank -> smaller key
  ASSERT_TRUE(reversed.valid());
  EXPECT_EQ(reversed.rank(), n - 1 - r);
  std::int32_t rank_in_world = r;
  std::vector<std::int32_t> order(static_cast<std::size_t>(n));
  reversed.allgather(&rank_in_world, order.data(), 1, HM_INT32);
  for (int i = 0; i < n; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], n - 1 - i);
}

TEST(SplitTest, UndefinedColorGetsNoCommunicator) {
  auto& comm = world();
  const int r = comm.rank();
  Communicator sub = comm.split(r == 0 ? HM_COLOR_UNDEFINED : 7, 0);
  EXPECT_EQ(sub.valid(), r != 0);
  if (sub.valid()) {
    EXPECT_EQ(sub.size(), comm.size() - 1);
    sub.barrier();
  }
}

TEST(SplitTest, SplitOfASplit) {
  auto& comm = world();
  const int r = comm.rank();
  Communicator a = comm.split(0, r);
  Communicator b = a.split(a.rank() % 2, 0);
  std::int32_t one = 1;
  std::int32_t count = 0;
  b.allreduce(&one, &count, 1, HM_INT32, HM_SUM);
  EXPECT_EQ(count, b.size());
}

// Rank 0 waits long enough to probe its peers (150 ms; on one host it waits on the shared
// board), then the others publish, finish and destroy the communicator at once. Their closing
// must not fail rank 0's call: what they published before closing still counts. (A clean-clone
// run once failed here with "closed its shm endpoint while this rank waits for data".)
TEST(SplitTest, LatePeersThatLeaveAtOnceStillCount) {
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  for (int round = 0; round < 4; ++round) {
    Communicator late = comm.split(0, r);
    ASSERT_TRUE(late.valid());
    if (r != 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::int64_t mine = r + round;
    std::int64_t total = -1;
    late.allreduce(&mine, &total, 1, HM_INT64, HM_SUM);
    EXPECT_EQ(total, static_cast<std::int64_t>(n) * (n - 1) / 2 + std::int64_t{n} * round)
        << "round " << round;
  }  // each rank destroys `late` as soon as its own call returned
  comm.barrier();
}

TEST(NonblockingTest, SeveralCollectivesInFlight) {
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  constexpr std::size_t kCount = 200000;
  std::vector<float> a(kCount, static_cast<float>(r));
  std::vector<float> a_out(kCount, -1);
  std::vector<std::int32_t> b(kCount, 1);
  std::vector<double> c(kCount, r == 0 ? 3.5 : 0.0);
  std::vector<std::int64_t> gathered(static_cast<std::size_t>(n), -1);
  std::int64_t mine = 10 * r;
  auto q1 = comm.iallreduce(a.data(), a_out.data(), kCount, HM_FLOAT32, HM_SUM);
  auto q2 = comm.iallreduce(b.data(), b.data(), kCount, HM_INT32, HM_SUM);
  auto q3 = comm.ibroadcast(c.data(), kCount, HM_FLOAT64, 0);
  auto q4 = comm.iallgather(&mine, gathered.data(), 1, HM_INT64);
  auto q5 = comm.ibarrier();
  // Waiting in reverse order is fine: they run in issue order regardless.
  q5.wait();
  q4.wait();
  q3.wait();
  q2.wait();
  q1.wait();
  const float sum = static_cast<float>(n * (n - 1) / 2);
  EXPECT_EQ(a_out.front(), sum);
  EXPECT_EQ(a_out.back(), sum);
  EXPECT_EQ(b[kCount / 2], n);
  EXPECT_EQ(c[kCount - 1], 3.5);
  for (int i = 0; i < n; ++i) EXPECT_EQ(gathered[static_cast<std::size_t>(i)], 10 * i);
  // A blocking call after nonblocking ones runs after them.
  auto q6 = comm.iallreduce(b.data(), b.data(), kCount, HM_INT32, HM_SUM);
  comm.allreduce(b.data(), b.data(), kCount, HM_INT32, HM_SUM);
  q6.wait();
  EXPECT_EQ(b[0], n * n * n);
}

TEST(NonblockingTest, TestPollsUntilDone) {
  auto& comm = world();
  std::vector<std::int32_t> data(1 << 20, 1);
  auto request = comm.iallreduce(data.data(), data.data(), data.size(), HM_INT32, HM_SUM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool done = false;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    done = request.test();
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(data[12345], comm.size());
}

// Results that are not exact (random floats, so rounding depends on the order of reduction)
// must still be bitwise identical on every rank, and the same from run to run.
class DeterminismTest : public ::testing::TestWithParam<hm_dtype_t> {};

TEST_P(DeterminismTest, AllreduceIsBitwiseIdenticalEverywhere) {
  const hm_dtype_t dtype = GetParam();
  auto& comm = world();
  const int r = comm.rank();
  constexpr std::size_t kCount = 300001;  // not a multiple of anything convenient
  const std::size_t es = dtype_size(dtype);
  std::mt19937 rng(1234 + r);
  std::uniform_real_distribution<double> dist(-1000, 1000);
  std::vector<std::byte> input(kCount * es);
  for (std::size_t i = 0; i < kCount; ++i) {
    check::encode(dist(rng) * 1.000123, dtype, input.data() + i * es);
  }
  for (hm_op_t op : {HM_SUM, HM_AVG, HM_PROD}) {
    std::vector<std::byte> first(input.size());
    std::vector<std::byte> second(input.size());
    comm.allreduce(input.data(), first.data(), kCount, dtype, op);
    comm.allreduce(input.data(), second.data(), kCount, dtype, op);
    EXPECT_EQ(first, second) << "two runs differ for op " << op_name(op);
    const auto everyone = gather_all(fingerprint(first.data(), first.size()));
    for (std::size_t i = 1; i < everyone.size(); ++i) {
      EXPECT_EQ(everyone[i], everyone[0])
          << "rank " << i << " differs from rank 0, op " << op_name(op);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Floats, DeterminismTest,
                         ::testing::Values(HM_FLOAT16, HM_BFLOAT16, HM_FLOAT32, HM_FLOAT64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace holmes::test
