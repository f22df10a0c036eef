// Tests of src/transports/progress_turns.hpp: a driving caller takes turns only while the
// transport's thread is parked and nobody else runs, never inside its own turn, and hands over
// when it sleeps; the transport's thread always gets its turn back.
#include "transports/common/progress_turns.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "eventually.hpp"

namespace holmes {
namespace {

using namespace std::chrono_literals;
using holmes::test_support::eventually;

// A lease that outlasts every test: only a hand-over (not expiry) resumes the transport's thread.
constexpr auto kNoExpiry = std::chrono::microseconds(10'000'000);

// The transport's thread: takes turns (counting them) until stopped.
class OwnThread {
 public:
  explicit OwnThread(ProgressTurns& turns) : turns_(turns), thread_([this] { loop(); }) {}
  ~OwnThread() {
    stop_ = true;
    turns_.close();
    thread_.join();
  }
  int turns() const { return turns_taken_.load(); }
  // Whether the turn in progress, if any, saw itself as running.
  bool saw_itself_running() const { return saw_running_.load(); }

 private:
  void loop() {
    while (!stop_) {
      turns_.own_turn([this] {
        saw_running_.store(turns_.running());
        turns_taken_.fetch_add(1);
        std::this_thread::sleep_for(200us);  // a handler, or a poll with nothing to do
      });
    }
  }
  ProgressTurns& turns_;
  std::atomic<bool> stop_{false};
  std::atomic<int> turns_taken_{0};
  std::atomic<bool> saw_running_{false};
  std::thread thread_;
};

TEST(ProgressTurns, ACallerThatDoesNotDriveNeverTakesATurn) {
  ProgressTurns turns(kNoExpiry);
  OwnThread own(turns);
  bool ran = false;
  EXPECT_FALSE(turns.run_as_driver([&] { ran = true; }));
  EXPECT_FALSE(ran);
  EXPECT_FALSE(turns.drives());
  EXPECT_TRUE(eventually([&] { return own.turns() > 3; })) << "the transport's thread did not run";
  EXPECT_TRUE(own.saw_itself_running());
}

TEST(ProgressTurns, ADriverTakesTurnsOnceTheTransportsThreadParks) {
  ProgressTurns turns(kNoExpiry);
  OwnThread own(turns);
  EXPECT_TRUE(turns.begin_drive()) << "the first driver must nudge the transport's thread";
  EXPECT_TRUE(turns.drives());
  // The transport's thread parks after its current turn; from then on the driver runs.
  std::atomic<bool> inside{false};
  ASSERT_TRUE(
      eventually([&] { return turns.run_as_driver([&] { inside.store(turns.running()); }); }));
  EXPECT_TRUE(inside.load()) << "a driver's turn must count as running";
  EXPECT_FALSE(turns.running()) << "running only lasts the turn";
  const int parked_at = own.turns();
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(turns.run_as_driver([] {}));
  EXPECT_EQ(own.turns(), parked_at) << "the transport's thread ran while a driver held the lease";
  turns.end_drive();
  EXPECT_FALSE(turns.drives());
  EXPECT_FALSE(turns.run_as_driver([] {}));
}

TEST(ProgressTurns, NoTurnInsideATurn) {
  ProgressTurns turns(kNoExpiry);
  OwnThread own(turns);
  turns.begin_drive();
  bool nested = true;
  ASSERT_TRUE(eventually(
      [&] { return turns.run_as_driver([&] { nested = turns.run_as_driver([] {}); }); }));
  EXPECT_FALSE(nested) << "work handed over inside a turn must be queued, not run re-entrantly";
  turns.end_drive();
}

TEST(ProgressTurns, ADriverAboutToSleepHandsOverAtOnce) {
  ProgressTurns turns(kNoExpiry);
  OwnThread own(turns);
  turns.begin_drive();
  ASSERT_TRUE(eventually([&] { return turns.run_as_driver([] {}); }));
  const int parked_at = own.turns();
  turns.stop_polling(false);  // not satisfied: about to sleep
  EXPECT_FALSE(turns.drives());
  EXPECT_TRUE(eventually([&] { return own.turns() > parked_at; }))
      << "the transport's thread stayed parked although its driver went to sleep";
  turns.end_drive();  // already handed over: nothing more
}

TEST(ProgressTurns, WorkHandedOverWithoutADriverResumesTheTransportsThread) {
  ProgressTurns turns(kNoExpiry);
  OwnThread own(turns);
  turns.begin_drive();
  ASSERT_TRUE(eventually([&] { return turns.run_as_driver([] {}); }));
  turns.end_drive();  // lingers: the lease runs on without a driver
  const int parked_at = own.turns();
  std::thread other([&] { turns.handed_over(); });  // a thread that does not drive
  other.join();
  EXPECT_TRUE(eventually([&] { return own.turns() > parked_at; }));
}

TEST(ProgressTurns, CloseGivesTheTransportsThreadItsTurnsForGood) {
  ProgressTurns turns(kNoExpiry);
  OwnThread own(turns);
  turns.begin_drive();
  ASSERT_TRUE(eventually([&] { return turns.run_as_driver([] {}); }));
  turns.close();
  const int closed_at = own.turns();
  EXPECT_TRUE(eventually([&] { return own.turns() > closed_at + 3; }));
  EXPECT_TRUE(eventually([&] { return !turns.run_as_driver([] {}); }))
      << "a driver still took turns after close";
  turns.end_drive();
}

}  // namespace
}  // namespace holmes
