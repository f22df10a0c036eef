// The turns the segments of a hierarchical collective take through its phases
// (collectives/hierarchical/segments.hpp): in order, one at a time, or up to a phase's width at
// once; a wait that nothing ends fails with HM_ERR_TIMEOUT instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "collectives/hierarchical/segments.hpp"
#include "core/status.hpp"

namespace holmes::hier {
namespace {

using namespace std::chrono_literals;

// Whether `segment` may enter `phase` now: its wait either returns or times out (the turns'
// own bound: nothing else completes, so the first timeout fails it).
bool enters(PhaseTurns& turns, std::uint64_t phase, int segment) {
  try {
    turns.enter(phase, segment);
    return true;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_TIMEOUT) << e.what();
    return false;
  }
}

TEST(PhaseTurns, OneSegmentAtATimeByDefault) {
  PhaseTurns turns(2, 50ms, nullptr);
  ASSERT_TRUE(enters(turns, 0, 0));
  EXPECT_FALSE(enters(turns, 0, 1));  // segment 0 is still in phase 0
  turns.leave(0, 0);
  EXPECT_TRUE(enters(turns, 0, 1));
  EXPECT_TRUE(enters(turns, 1, 0));  // phases are independent
}

TEST(PhaseTurns, AWidePhaseTakesSeveralSegmentsInOrder) {
  PhaseTurns turns(2, 50ms, nullptr, {1, 2});
  ASSERT_TRUE(enters(turns, 1, 0));
  EXPECT_TRUE(enters(turns, 1, 1));   // beside segment 0
  EXPECT_FALSE(enters(turns, 1, 3));  // not before segment 2
  turns.leave(1, 1);
  EXPECT_FALSE(enters(turns, 1, 2));  // segment 0 is still in: two at most
  turns.leave(1, 0);
  EXPECT_TRUE(enters(turns, 1, 2));
  EXPECT_TRUE(enters(turns, 1, 3));
  EXPECT_FALSE(enters(turns, 1, 4));
  EXPECT_TRUE(enters(turns, 0, 0));
  EXPECT_FALSE(enters(turns, 0, 1));  // phase 0 keeps width 1
}

// A segment waiting for its turn goes in as soon as the one ahead leaves, from another thread.
TEST(PhaseTurns, ALeavingSegmentLetsTheNextIn) {
  PhaseTurns turns(1, 10s, nullptr, {2});
  ASSERT_TRUE(enters(turns, 0, 0));
  ASSERT_TRUE(enters(turns, 0, 1));
  std::atomic<bool> entered{false};
  std::thread third([&] {
    turns.enter(0, 2);
    entered = true;
  });
  turns.leave(0, 0);
  third.join();  // returns only once segment 2 got in
  EXPECT_TRUE(entered);
}

TEST(PhaseTurns, AbortEndsEveryWait) {
  PhaseTurns turns(1, 10s, nullptr);
  ASSERT_TRUE(enters(turns, 0, 0));
  std::atomic<bool> aborted{false};
  std::thread waiting([&] {
    try {
      turns.enter(0, 1);
    } catch (const TurnAborted&) {
      aborted = true;
    }
  });
  turns.abort();
  waiting.join();
  EXPECT_TRUE(aborted);
}

}  // namespace
}  // namespace holmes::hier
