// allgather, broadcast, alltoall, send/recv and barrier: every dtype x count x placement, each
// element checked against the value its source rank wrote.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <tuple>

#include "check_data.hpp"
#include "core/dtype.hpp"
#include "world.hpp"

namespace holmes::test {
namespace {

using check::count_wrong;
using check::fill_input;

std::string move_name(const ::testing::TestParamInfo<MoveParam>& info) {
  const auto [dtype, count, placement] = info.param;
  return std::string(dtype_name(dtype)) + "_" + count_case_name(count) + "_" +
         placement_name(placement);
}

constexpr Placement kAllgatherPlacements[] = {Placement::kOutOfPlace, Placement::kInPlace,
                                              Placement::kSamePointer};
class AllgatherTest : public ::testing::TestWithParam<MoveParam> {};

TEST_P(AllgatherTest, EveryRankGetsEveryBlock) {
  const auto [dtype, count_case, placement] = GetParam();
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  const auto nn = static_cast<std::size_t>(n);
  const std::size_t count = count_for(count_case, dtype, n, nn);
  const std::size_t es = dtype_size(dtype);
  const unsigned salt = salt_of(dtype, static_cast<int>(count_case), 0, 4);
  std::vector<std::byte> expected(nn * count * es);
  for (int j = 0; j < n; ++j) {
    fill_input(expected.data() + static_cast<std::size_t>(j) * count * es, dtype, HM_SUM, j,
               static_cast<std::size_t>(j) * count, count, salt);
  }
  auto recv = garbage(nn * count, dtype);
  std::byte* own_block = recv.data() + static_cast<std::size_t>(r) * count * es;
  switch (placement) {
    case Placement::kOutOfPlace: {
      std::vector<std::byte> send(count * es);
      fill_input(send.data(), dtype, HM_SUM, r, static_cast<std::size_t>(r) * count, count, salt);
      comm.allgather(send.data(), recv.data(), count, dtype);
      break;
    }
    case Placement::kInPlace:  // NCCL: the input already sits in this rank's block
      fill_input(own_block, dtype, HM_SUM, r, static_cast<std::size_t>(r) * count, count, salt);
      comm.allgather(own_block, recv.data(), count, dtype);
      break;
    case Placement::kSamePointer:  // the input at the start of the output buffer
      fill_input(recv.data(), dtype, HM_SUM, r, static_cast<std::size_t>(r) * count, count, salt);
      comm.allgather(recv.data(), recv.data(), count, dtype);
      break;
  }
  EXPECT_EQ(count_wrong(recv.data(), expected.data(), nn * count, dtype), 0u);
}

INSTANTIATE_TEST_SUITE_P(Matrix, AllgatherTest,
                         ::testing::ValuesIn(move_matrix(kAllgatherPlacements)), move_name);

constexpr Placement kBroadcastPlacements[] = {Placement::kOutOfPlace, Placement::kInPlace};
class BroadcastTest : public ::testing::TestWithParam<MoveParam> {};

TEST_P(BroadcastTest, EveryRankGetsTheRootsBuffer) {
  const auto [dtype, count_case, placement] = GetParam();
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  const std::size_t count = count_for(count_case, dtype, n, 1);
  const unsigned salt = salt_of(dtype, static_cast<int>(count_case), 0, 5);
  // Broadcast has one buffer; the placement parameter chooses the root instead.
  const int root = placement == Placement::kOutOfPlace ? 0 : n - 1;
  std::vector<std::byte> expected(count * dtype_size(dtype));
  fill_input(expected.data(), dtype, HM_SUM, root, 0, count, salt);
  auto buffer = garbage(count, dtype);
  if (r == root) buffer = expected;
  comm.broadcast(buffer.data(), count, dtype, root);
  EXPECT_EQ(count_wrong(buffer.data(), expected.data(), count, dtype), 0u);
}

INSTANTIATE_TEST_SUITE_P(Matrix, BroadcastTest,
                         ::testing::ValuesIn(move_matrix(kBroadcastPlacements)), move_name);

constexpr Placement kAlltoallPlacements[] = {Placement::kOutOfPlace, Placement::kInPlace};
class AlltoallTest : public ::testing::TestWithParam<MoveParam> {};

TEST_P(AlltoallTest, BlockJGoesToRankJ) {
  const auto [dtype, count_case, placement] = GetParam();
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  const auto nn = static_cast<std::size_t>(n);
  const std::size_t count = count_for(count_case, dtype, n, nn);
  const std::size_t es = dtype_size(dtype);
  const unsigned salt = salt_of(dtype, static_cast<int>(count_case), 0, 6);
  // Block j of rank i's input holds elements j*count.. of rank i's pattern; rank r must receive
  // from every i the block r of i's pattern, at block i.
  std::vector<std::byte> send(nn * count * es);
  fill_input(send.data(), dtype, HM_SUM, r, 0, nn * count, salt);
  std::vector<std::byte> expected(nn * count * es);
  for (int i = 0; i < n; ++i) {
    fill_input(expected.data() + static_cast<std::size_t>(i) * count * es, dtype, HM_SUM, i,
               static_cast<std::size_t>(r) * count, count, salt);
  }
  if (placement == Placement::kInPlace) {
    comm.alltoall(send.data(), send.data(), count, dtype);
    EXPECT_EQ(count_wrong(send.data(), expected.data(), nn * count, dtype), 0u);
  } else {
    auto recv = garbage(nn * count, dtype);
    comm.alltoall(send.data(), recv.data(), count, dtype);
    EXPECT_EQ(count_wrong(recv.data(), expected.data(), nn * count, dtype), 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, AlltoallTest,
                         ::testing::ValuesIn(move_matrix(kAlltoallPlacements)), move_name);

// Point to point: a ring where every rank sends to the next and receives from the previous.
// kOutOfPlace uses blocking send/recv ordered to avoid a cycle of waits (even ranks send first);
// kInPlace uses isend/irecv all at once.
constexpr Placement kSendRecvPlacements[] = {Placement::kOutOfPlace, Placement::kInPlace};
class SendRecvTest : public ::testing::TestWithParam<MoveParam> {};

TEST_P(SendRecvTest, RingNeighboursExchange) {
  const auto [dtype, count_case, placement] = GetParam();
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  if (n == 1) {
    // Nothing to exchange with; make sure messages to self are refused cleanly, not hung.
    std::vector<std::byte> buffer(dtype_size(dtype));
    EXPECT_THROW(comm.send(buffer.data(), 1, dtype, 0), Error);
    return;
  }
  const std::size_t count = count_for(count_case, dtype, n, 1);
  const unsigned salt = salt_of(dtype, static_cast<int>(count_case), 0, 7);
  const int next = (r + 1) % n;
  const int previous = (r + n - 1) % n;
  std::vector<std::byte> send(count * dtype_size(dtype));
  fill_input(send.data(), dtype, HM_SUM, r, 0, count, salt);
  std::vector<std::byte> expected(send.size());
  fill_input(expected.data(), dtype, HM_SUM, previous, 0, count, salt);
  auto recv = garbage(count, dtype);
  if (placement == Placement::kOutOfPlace) {
    if (r % 2 == 0) {
      comm.send(send.data(), count, dtype, next);
      comm.recv(recv.data(), count, dtype, previous);
    } else {
      comm.recv(recv.data(), count, dtype, previous);
      comm.send(send.data(), count, dtype, next);
    }
  } else {
    auto got = comm.irecv(recv.data(), count, dtype, previous);
    auto sent = comm.isend(send.data(), count, dtype, next);
    sent.wait();
    got.wait();
  }
  EXPECT_EQ(count_wrong(recv.data(), expected.data(), count, dtype), 0u);
}

INSTANTIATE_TEST_SUITE_P(Matrix, SendRecvTest,
                         ::testing::ValuesIn(move_matrix(kSendRecvPlacements)), move_name);

// Several messages to the same peer arrive in the order they were sent.
TEST(SendRecvOrderTest, MessagesArriveInOrder) {
  auto& comm = world();
  const int n = comm.size();
  if (n == 1) return;
  const int r = comm.rank();
  constexpr int kMessages = 20;
  std::vector<std::vector<std::int32_t>> out(kMessages), in(kMessages);
  std::vector<Request> requests;
  for (int m = 0; m < kMessages; ++m) {
    // Mixed sizes, so small messages could overtake large ones if ordering were wrong.
    const std::size_t count = (m % 3 == 0) ? 300000 : 5;
    out[m].assign(count, r * 1000 + m);
    in[m].assign(count, -1);
    requests.push_back(comm.isend(out[m].data(), count, HM_INT32, (r + 1) % n));
  }
  for (int m = 0; m < kMessages; ++m) {
    comm.recv(in[m].data(), in[m].size(), HM_INT32, (r + n - 1) % n);
    const int previous = (r + n - 1) % n;
    EXPECT_EQ(in[m].front(), previous * 1000 + m);
    EXPECT_EQ(in[m].back(), previous * 1000 + m);
  }
  for (auto& q : requests) q.wait();
}

// Tagged messages: a receive takes the first message with its tag, whatever was sent before it
// with other tags; messages with one tag stay in order; untagged ones are tag 0.
TEST(SendRecvOrderTest, TagsAreMatchedIndependently) {
  auto& comm = world();
  const int n = comm.size();
  if (n == 1) return;
  const int r = comm.rank();
  const int next = (r + 1) % n;
  const int previous = (r + n - 1) % n;
  // Sent in the order tag 7 (twice, a large one first), tag 5, untagged, tag 2^30 - 1.
  const std::uint32_t kTags[] = {7, 7, 5, 0, (1u << 30) - 1};
  constexpr std::size_t kCounts[] = {300000, 3, 11, 4, 2};
  std::vector<std::vector<std::int32_t>> out(5), in(5);
  std::vector<Request> requests;
  for (std::size_t m = 0; m < 5; ++m) {
    out[m].assign(kCounts[m], r * 100 + static_cast<int>(m));
    requests.push_back(comm.isend(out[m].data(), kCounts[m], HM_INT32, next, kTags[m]));
  }
  // Received in the reverse order of tags: each receive must find its own tag's message.
  const std::size_t kOrder[] = {4, 3, 2, 0, 1};
  for (const std::size_t m : kOrder) {
    in[m].assign(kCounts[m], -1);
    if (kTags[m] == 0) {
      comm.recv(in[m].data(), kCounts[m], HM_INT32, previous);
    } else {
      comm.irecv(in[m].data(), kCounts[m], HM_INT32, previous, kTags[m]).wait();
    }
    EXPECT_EQ(in[m].front(), previous * 100 + static_cast<int>(m)) << "message " << m;
    EXPECT_EQ(in[m].back(), previous * 100 + static_cast<int>(m)) << "message " << m;
  }
  for (auto& q : requests) q.wait();
}

// Receives from any source (HM_ANY_SOURCE): every message is taken exactly once, each sender's
// in the order it sent them, whether the receive was posted before the message came or after;
// Request::source() names the sender. 400 KB messages travel in several fragments, so the
// senders' fragments interleave at the receiver.
TEST(AnySourceTest, TakesEveryMessageOnceInEachSendersOrder) {
  auto& comm = world();
  const int n = comm.size();
  if (n == 1) return;
  const int r = comm.rank();
  constexpr int kPerPhase = 2;
  constexpr std::size_t kCount = 100000;
  constexpr std::uint32_t kTag = 3;
  auto value = [](int sender, int m) { return sender * 1000 + m; };
  const auto senders = static_cast<std::size_t>(n - 1);
  std::vector<int> taken(static_cast<std::size_t>(n), 0);  // rank 0: messages taken per sender
  // Checks a message rank 0 took: its sender's next one, whole.
  auto check = [&](const std::vector<std::int32_t>& in, int source) {
    ASSERT_TRUE(source >= 1 && source < n) << "source " << source;
    const int m = taken[static_cast<std::size_t>(source)]++;
    EXPECT_EQ(std::count(in.begin(), in.end() - 1, value(source, m)),
              static_cast<std::ptrdiff_t>(kCount - 1))
        << "message " << m << " of rank " << source;
    EXPECT_EQ(in.back(), -value(source, m)) << "message " << m << " of rank " << source;
  };
  std::vector<std::vector<std::int32_t>> out(2 * kPerPhase);
  std::vector<Request> sent;
  auto send_phase = [&](int phase) {
    for (int m = phase * kPerPhase; m < (phase + 1) * kPerPhase; ++m) {
      auto& message = out[static_cast<std::size_t>(m)];
      message.assign(kCount, value(r, m));
      message.back() = -value(r, m);
      sent.push_back(comm.isend(message.data(), kCount, HM_INT32, 0, kTag));
    }
  };
  // Phase 0: every receive is posted before anything is sent.
  std::vector<std::vector<std::int32_t>> in(kPerPhase * senders,
                                            std::vector<std::int32_t>(kCount, -1));
  std::vector<Request> posted;
  if (r == 0) {
    for (auto& buffer : in) {
      posted.push_back(comm.irecv(buffer.data(), kCount, HM_INT32, HM_ANY_SOURCE, kTag));
      EXPECT_EQ(posted.back().source(), -1);
    }
  }
  comm.barrier();
  if (r != 0) send_phase(0);
  for (std::size_t i = 0; i < posted.size(); ++i) {
    posted[i].wait();
    check(in[i], posted[i].source());
  }
  // Phase 1: the messages are sent (and may have arrived) before their receives are posted.
  if (r != 0) send_phase(1);
  comm.barrier();
  if (r == 0) {
    for (std::size_t i = 0; i < kPerPhase * senders; ++i) {
      std::vector<std::int32_t> buffer(kCount, -1);
      auto q = comm.irecv(buffer.data(), kCount, HM_INT32, HM_ANY_SOURCE, kTag);
      q.wait();
      check(buffer, q.source());
    }
    for (int s = 1; s < n; ++s) EXPECT_EQ(taken[static_cast<std::size_t>(s)], 2 * kPerPhase);
  }
  for (auto& q : sent) q.wait();
  comm.barrier();
}

// With one sender at a time, the any-source receive posted before it sent names that sender.
TEST(AnySourceTest, NamesTheRankThatSent) {
  auto& comm = world();
  const int n = comm.size();
  if (n == 1) return;
  const int r = comm.rank();
  constexpr std::uint32_t kData = 4;
  constexpr std::uint32_t kGo = 5;
  for (int s = n - 1; s >= 1; --s) {
    std::int64_t go = s;
    if (r == 0) {
      std::int64_t got = -1;
      auto q = comm.irecv(&got, 1, HM_INT64, HM_ANY_SOURCE, kData);
      comm.isend(&go, 1, HM_INT64, s, kGo).wait();
      q.wait();
      EXPECT_EQ(q.source(), s);
      EXPECT_EQ(got, 100 + s);
    } else if (r == s) {
      std::int64_t told = -1;
      comm.irecv(&told, 1, HM_INT64, 0, kGo).wait();
      EXPECT_EQ(told, s);
      const std::int64_t mine = 100 + s;
      comm.isend(&mine, 1, HM_INT64, 0, kData).wait();
    }
  }
  comm.barrier();
}

// Named and any-source receives of one tag share the sender's order: neither takes a message
// twice or skips one. A named receive takes its number when posted; an any-source one the
// sender's next message when it arrives.
TEST(AnySourceTest, SharesTheSendersOrderWithNamedReceives) {
  auto& comm = world();
  const int n = comm.size();
  if (n == 1) return;
  const int r = comm.rank();
  constexpr std::uint32_t kTag = 6;
  std::int32_t got[4] = {-1, -1, -1, -1};
  Request named_first;
  if (r == 0) named_first = comm.irecv(&got[0], 1, HM_INT32, 1, kTag);  // before anything is sent
  comm.barrier();
  if (r == 1) {
    const std::int32_t out[4] = {10, 11, 12, 13};
    std::vector<Request> sent;
    for (const auto& x : out) sent.push_back(comm.isend(&x, 1, HM_INT32, 0, kTag));
    for (auto& q : sent) q.wait();
  } else if (r == 0) {
    auto any = comm.irecv(&got[1], 1, HM_INT32, HM_ANY_SOURCE, kTag);
    any.wait();
    EXPECT_EQ(any.source(), 1);
    comm.irecv(&got[2], 1, HM_INT32, 1, kTag).wait();
    any = comm.irecv(&got[3], 1, HM_INT32, HM_ANY_SOURCE, kTag);
    any.wait();
    EXPECT_EQ(any.source(), 1);
    named_first.wait();
    EXPECT_EQ(got[0], 10);
    EXPECT_EQ(got[1], 11);
    EXPECT_EQ(got[2], 12);
    EXPECT_EQ(got[3], 13);
  }
  comm.barrier();
}

TEST(AnySourceTest, OnlyReceivesTakeIt) {
  auto& comm = world();
  std::int32_t x = 0;
  try {
    if (comm.size() == 1) {
      comm.irecv(&x, 1, HM_INT32, HM_ANY_SOURCE);
      ADD_FAILURE() << "a receive from any source in a world of one was accepted";
    } else {
      comm.isend(&x, 1, HM_INT32, HM_ANY_SOURCE);
      ADD_FAILURE() << "a send to HM_ANY_SOURCE was accepted";
    }
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find(comm.size() == 1 ? "nobody can send" : "names no peer"),
              std::string::npos)
        << e.what();
  }
}

TEST(SendRecvOrderTest, ATagOutOfRangeIsRefused) {
  auto& comm = world();
  if (comm.size() == 1) return;
  std::int32_t x = 0;
  try {
    comm.isend(&x, 1, HM_INT32, (comm.rank() + 1) % comm.size(), 1u << 30);
    ADD_FAILURE() << "a tag of 2^30 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("tag 1073741824 is outside"), std::string::npos)
        << e.what();
  }
}

// No rank leaves the barrier before the last one has entered it.
TEST(BarrierTest, NobodyLeavesEarly) {
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(40 * r));  // the last rank enters last
  comm.barrier();
  const auto waited = std::chrono::steady_clock::now() - start;
  // Ranks leave the first barrier a little apart, so allow that skew.
  EXPECT_GE(waited, std::chrono::milliseconds(40 * (n - 1) - 10));
}

TEST(BarrierTest, ManyInARow) {
  for (int i = 0; i < 50; ++i) world().barrier();
}

}  // namespace
}  // namespace holmes::test
