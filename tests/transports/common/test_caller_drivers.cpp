// Tests of src/transports/common/caller_drivers.hpp: which threads drive a transport, answered
// without a lock for the first few and correctly for any number.
#include "transports/common/caller_drivers.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <thread>
#include <vector>

namespace holmes {
namespace {

TEST(CallerDrivers, EachThreadSeesOnlyItsOwnMembership) {
  CallerDrivers drivers;
  EXPECT_FALSE(drivers.contains());
  EXPECT_FALSE(drivers.remove());
  drivers.add();
  EXPECT_TRUE(drivers.contains());
  std::thread([&] {
    EXPECT_FALSE(drivers.contains());  // another thread drives, not this one
    EXPECT_FALSE(drivers.remove());
  }).join();
  EXPECT_TRUE(drivers.remove());
  EXPECT_FALSE(drivers.contains());
  EXPECT_FALSE(drivers.remove());
}

TEST(CallerDrivers, AThreadAddedTwiceStaysUntilRemovedTwice) {
  CallerDrivers drivers;
  drivers.add();
  drivers.add();
  EXPECT_TRUE(drivers.remove());
  EXPECT_TRUE(drivers.contains());
  EXPECT_TRUE(drivers.remove());
  EXPECT_FALSE(drivers.contains());
}

TEST(CallerDrivers, MoreThreadsThanSlotsAllCount) {
  // 12 threads join at once (more than the lock-free slots), check, leave in two waves.
  constexpr int kThreads = 12;
  CallerDrivers drivers;
  std::barrier all_in(kThreads);
  std::barrier first_wave_out(kThreads);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      drivers.add();
      all_in.arrive_and_wait();
      if (!drivers.contains()) ++wrong;
      if (t % 2 == 0 && !drivers.remove()) ++wrong;
      first_wave_out.arrive_and_wait();
      if (drivers.contains() != (t % 2 == 1)) ++wrong;
      if (t % 2 == 1 && !drivers.remove()) ++wrong;
      if (drivers.contains() || drivers.remove()) ++wrong;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  drivers.add();  // every slot is free again
  EXPECT_TRUE(drivers.contains());
  EXPECT_TRUE(drivers.remove());
}

}  // namespace
}  // namespace holmes
