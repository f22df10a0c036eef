// Tests of src/transports/io_lease.hpp: when a transport's own thread (tcp's io thread, ucx's
// progress thread) steps aside for callers that drive small collectives, and that it always comes
// back (a caller that stops polling, one that goes to sleep, shutdown) so that no socket or worker
// is left unserved.
#include "transports/common/io_lease.hpp"

#include <gtest/gtest.h>

#include "eventually.hpp"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace holmes {
namespace {

using namespace std::chrono_literals;
using holmes::test_support::eventually;

constexpr auto kLinger = std::chrono::microseconds(2000);
// A lease that outlasts every test: only a hand-over (not expiry) can resume the io thread.
constexpr auto kNoExpiry = std::chrono::microseconds(10'000'000);

// The io thread's side: parks in wait_while_leased, runs "handlers" (counts them) when not.
class IoThread {
 public:
  explicit IoThread(IoLease& lease) : lease_(lease), thread_([this] { loop(); }) {}
  ~IoThread() {
    stop_ = true;
    lease_.close();
    thread_.join();
  }
  // How many times it came back from the lease.
  int resumed() const { return resumed_.load(); }

 private:
  void loop() {
    while (!stop_) {
      lease_.wait_while_leased();
      resumed_.fetch_add(1);
      std::this_thread::sleep_for(200us);  // a handler, or epoll with nothing to do
    }
  }
  IoLease& lease_;
  std::atomic<bool> stop_{false};
  std::atomic<int> resumed_{0};
  std::thread thread_;
};

TEST(IoLease, NobodyDrivingMeansTheIoThreadRuns) {
  IoLease lease(kLinger);
  IoThread io(lease);
  EXPECT_TRUE(eventually([&] { return io.resumed() > 5; }));
  EXPECT_FALSE(lease.parked());
}

TEST(IoLease, TheFirstCallerAsksForANudgeAndLaterOnesDoNot) {
  IoLease lease(kLinger);
  EXPECT_TRUE(lease.begin());
  EXPECT_FALSE(lease.begin());  // one nudge is on its way already
  lease.end(IoLease::Ending::kLinger);
  lease.end(IoLease::Ending::kLinger);
}

TEST(IoLease, APollingCallerKeepsTheIoThreadParked) {
  // A linger far above this busy machine's scheduling delays, so that each poll surely comes
  // inside it.
  constexpr auto kLong = std::chrono::microseconds(100'000);
  IoLease lease(kLong);
  IoThread io(lease);
  lease.begin();
  ASSERT_TRUE(eventually([&] { return lease.parked(); }));
  const int before = io.resumed();
  // Polls every millisecond for five lingers: the io thread never runs meanwhile.
  const auto until = Clock::now() + 5 * kLong;
  while (Clock::now() < until) {
    lease.renew();
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_TRUE(lease.parked());
  EXPECT_EQ(io.resumed(), before);
  lease.end(IoLease::Ending::kLinger);
  // The end of a call does not wake it, but the lease runs out a linger later.
  EXPECT_TRUE(eventually([&] { return io.resumed() > before; }));
}

TEST(IoLease, ACallerThatStopsPollingLosesTheLease) {
  IoLease lease(std::chrono::microseconds(200'000));
  IoThread io(lease);
  lease.begin();
  ASSERT_TRUE(eventually([&] { return lease.parked(); }));
  const int before = io.resumed();
  // Still "driving" but blocked elsewhere: the io thread must come back on its own.
  EXPECT_TRUE(eventually([&] { return io.resumed() > before; }));
  EXPECT_FALSE(lease.parked());
  lease.end(IoLease::Ending::kLinger);
}

TEST(IoLease, ACallerAboutToSleepHandsOverAtOnce) {
  IoLease lease(kNoExpiry);
  IoThread io(lease);
  lease.begin();
  ASSERT_TRUE(eventually([&] { return lease.parked(); }));
  const int before = io.resumed();
  lease.end(IoLease::Ending::kResumeNow);
  EXPECT_TRUE(eventually([&] { return io.resumed() > before; }, 2000ms));
}

TEST(IoLease, ASleepingCallerDoesNotResumeWhileAnotherDrives) {
  IoLease lease(kNoExpiry);
  IoThread io(lease);
  lease.begin();
  lease.begin();
  ASSERT_TRUE(eventually([&] { return lease.parked(); }));
  const int before = io.resumed();
  lease.end(IoLease::Ending::kResumeNow);  // one goes to sleep; the other still polls
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(io.resumed(), before);
  lease.end(IoLease::Ending::kResumeNow);
  EXPECT_TRUE(eventually([&] { return io.resumed() > before; }, 2000ms));
}

TEST(IoLease, WorkFromAThreadThatDoesNotDriveResumesTheIoThread) {
  IoLease lease(kNoExpiry);
  IoThread io(lease);
  lease.begin();
  ASSERT_TRUE(eventually([&] { return lease.parked(); }));
  lease.end(IoLease::Ending::kLinger);  // the lease lingers on
  const int before = io.resumed();
  lease.release();
  EXPECT_TRUE(eventually([&] { return io.resumed() > before; }, 2000ms));
}

TEST(IoLease, CloseEndsEveryLeaseForGood) {
  IoLease lease(kNoExpiry);
  lease.begin();
  auto parked_once = std::async(std::launch::async, [&] { lease.wait_while_leased(); });
  ASSERT_TRUE(eventually([&] { return lease.parked(); }));
  lease.close();
  ASSERT_EQ(parked_once.wait_for(2s), std::future_status::ready);
  EXPECT_FALSE(lease.parked());
  // After close, beginning to drive neither asks for a nudge nor parks the io thread.
  EXPECT_FALSE(lease.begin());
  const auto start = Clock::now();
  lease.wait_while_leased();
  EXPECT_LT(Clock::now() - start, 1s);
}

}  // namespace
}  // namespace holmes
