// The turns the segments of a hierarchical collective take through its phases
// (collectives/hierarchical/segments.hpp): in order, one at a time, or up to a phase's width at
// once; a wait that nothing ends fails with HM_ERR_TIMEOUT instead of hanging. And what
// run_segments does with a caller that drives its transports.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/hierarchical/segments.hpp"
#include "core/status.hpp"
#include "loopback_transport.hpp"
#include "transports/capabilities.hpp"
#include "transports/kinds.hpp"
#include "transports/router.hpp"

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

// A phase with a lead of 1 until phase 2: segment s starts it only once segment s-1 has entered
// phase 2, however early s is done with the phase before.
TEST(PhaseTurns, ALedPhaseWaitsForTheSegmentAheadToReachItsTarget) {
  PhaseTurns turns(3, 50ms, nullptr, {}, {PhaseLead{1, 2}, PhaseLead{1, 2}});
  ASSERT_TRUE(enters(turns, 0, 0));  // segment 0 has no one ahead
  turns.leave(0, 0);
  EXPECT_FALSE(enters(turns, 0, 1));  // segment 0 has not reached phase 2
  ASSERT_TRUE(enters(turns, 1, 0));
  turns.leave(1, 0);
  EXPECT_FALSE(enters(turns, 0, 1));  // phase 1 is not enough
  ASSERT_TRUE(enters(turns, 2, 0));
  EXPECT_TRUE(enters(turns, 0, 1));  // now it is
  turns.leave(0, 1);
  EXPECT_TRUE(enters(turns, 1, 1));  // and for phase 1, led the same way
  turns.leave(1, 1);
  EXPECT_FALSE(enters(turns, 0, 2));  // segment 1 has not reached phase 2
  turns.leave(2, 0);
  EXPECT_TRUE(enters(turns, 2, 1));  // the target itself is not led
  EXPECT_TRUE(enters(turns, 0, 2));
}

TEST(PhaseTurns, ALeadMustPointAtAPhase) {
  EXPECT_THROW(PhaseTurns(2, 50ms, nullptr, {}, {PhaseLead{1, 2}}), Error);
}

// Segments that each wait for a lead from another thread all get through (none waits for one
// behind it).
TEST(PhaseTurns, LedSegmentsRunThroughOnTheirOwnThreads) {
  constexpr int kSegments = 6;
  PhaseTurns turns(3, 10s, nullptr, {1, 1, 2}, {PhaseLead{1, 2}, PhaseLead{1, 2}});
  std::mutex mutex;
  std::vector<int> reached;  // segments that entered phase 2
  std::vector<std::thread> threads;
  for (int s = 0; s < kSegments; ++s) {
    threads.emplace_back([&, s] {
      for (std::uint64_t phase = 0; phase < 3; ++phase) {
        turns.enter(phase, s);
        if (phase == 2) {
          std::lock_guard lock(mutex);
          reached.push_back(s);
        }
        turns.leave(phase, s);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::sort(reached.begin(), reached.end());
  EXPECT_EQ(reached, std::vector<int>({0, 1, 2, 3, 4, 5}));
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

// Segments of uneven weights: in order, back to back, covering every element once.
TEST(WeightedBlocks, CutInProportionAndCoverTheWhole) {
  const BlockLayout layout = weighted_blocks(1100, {0.25, 0.5, 1, 1, 0.5, 0.25});
  const std::vector<std::size_t> expected = {78, 157, 315, 314, 157, 79};
  std::size_t at = 0;
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(layout.block_start(k), at) << k;
    EXPECT_EQ(layout.block_size(k), expected[static_cast<std::size_t>(k)]) << k;
    at += layout.block_size(k);
  }
  EXPECT_EQ(at, 1100u);
  // Fewer elements than blocks: some are empty, none overlaps, the total holds.
  const BlockLayout few = weighted_blocks(3, {0.25, 0.5, 1, 1, 0.5, 0.25});
  std::size_t total = 0;
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(few.block_start(k), total) << k;
    total += few.block_size(k);
  }
  EXPECT_EQ(total, 3u);
}

// Records whether a caller drives it, as a transport's caller drive would.
class RecordedDrive final : public CallerDrive {
 public:
  void begin_caller_drive() override { driving = true; }
  void end_caller_drive() override { driving = false; }
  Progress* caller_progress() override { return nullptr; }
  std::chrono::microseconds yield_before_sleep(int) const override {
    return std::chrono::microseconds(0);
  }
  std::atomic<bool> driving{false};
};

// A one-rank communicator's context whose calling thread drives `drive`.
struct DrivenContext {
  explicit DrivenContext(RecordedDrive& drive) {
    std::vector<std::unique_ptr<Transport>> transports;
    transports.push_back(fabric.make_endpoint(0, false));
    std::vector<std::vector<std::string>> addresses(std::size(kAllTransportKinds));
    addresses[0].push_back("loopback:0");
    router = std::make_unique<Router>(0, std::move(transports),
                                      std::vector<Route>{Route{TransportKind::kTcp, "loopback"}},
                                      addresses);
    CollectiveResources resources;
    resources.scratch = &scratch;
    resources.driven = &drive;
    ctx = std::make_unique<CollectiveContext>(*router, 0, 1, 0, 0, 10s, 1 << 20,
                                              OperationName{"allreduce", 0, "hier", 0}, resources);
  }
  test::LoopbackFabric fabric{1};
  ScratchSpace scratch;
  std::unique_ptr<Router> router;
  std::unique_ptr<CollectiveContext> ctx;
};

// While segments run on threads of their own the caller only joins them: a drive it kept would
// tell peers not to wake this rank's transport threads, and its messages would wait for those
// threads to wake by themselves (the stall this guards against: 0.4-1.2 s per call on shm).
TEST(RunSegments, TheCallerHandsItsDriveBackWhileSegmentsRun) {
  RecordedDrive drive;
  DrivenContext driven(drive);
  drive.begin_caller_drive();
  std::mutex mutex;
  std::vector<bool> seen;
  run_segments(*driven.ctx, 3, 1, {3}, {}, nullptr, [&](int, ScratchSpace*, SegmentTurn) {
    const std::lock_guard<std::mutex> lock(mutex);
    seen.push_back(drive.driving);
  });
  EXPECT_EQ(seen, std::vector<bool>(3, false));
  EXPECT_TRUE(drive.driving);  // taken up again for the rest of the call
}

// One segment runs on the calling thread, which polls as it waits: its drive stays.
TEST(RunSegments, OneSegmentKeepsTheDrive) {
  RecordedDrive drive;
  DrivenContext driven(drive);
  drive.begin_caller_drive();
  bool during = false;
  run_segments(*driven.ctx, 1, 1, {1}, {}, nullptr,
               [&](int, ScratchSpace*, SegmentTurn) { during = drive.driving; });
  EXPECT_TRUE(during);
  EXPECT_TRUE(drive.driving);
}

}  // namespace
}  // namespace holmes::hier
