// Combining receives over shm (CombiningReceive::irecv_reduce): the buffer ends as in + message,
// element by element, whether the fragments are reduced straight from the ring (the receive is
// posted first, or comes while they wait there), from a bounce buffer (cross-memory attach, or
// fragments moved out of a small ring to make room), or in place; and the switch turns it off.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <tuple>

#include "combining_receive.hpp"
#include "core/status.hpp"
#include "shm_test_util.hpp"

namespace holmes::shm {
namespace {

using namespace testing;

class ShmCombineTest : public ::testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(segments_of(getpid()), std::vector<std::string>{}) << "segments left in /dev/shm";
  }
};

// Endpoint 0 sends `bytes` to endpoint 1, which combines them with its own input.
void combine(std::size_t bytes, bool receive_first, const ShmTuning& t, bool in_place) {
  auto endpoints = job(2, t);
  test::expect_combining_receive(*endpoints[0], *endpoints[1], pattern(bytes, 3), pattern(bytes, 4),
                                 receive_first, in_place);
}

class ShmCombineShapes
    : public ShmCombineTest,
      public ::testing::WithParamInterface<std::tuple<std::size_t, bool, bool, bool>> {};

TEST_P(ShmCombineShapes, EndsAsInputPlusMessage) {
  const auto [bytes, receive_first, cma, in_place] = GetParam();
  ShmTuning t = tuning(cma);
  t.cma_min_bytes = 64u << 10;  // so that a few of the sizes below go by cross-memory attach
  combine(bytes, receive_first, t, in_place);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ShmCombineShapes,
    ::testing::Combine(::testing::Values(4, 4096, (256u << 10) + 4, (1u << 20) + 12),
                       ::testing::Bool(), ::testing::Bool(), ::testing::Bool()));

// A 64 KiB ring: many fragments, and a late receive finds most of them moved out of the way.
TEST_F(ShmCombineTest, SmallRingManyFragments) {
  combine((3u << 20) + 16, true, tuning(false, 64 << 10), false);
  combine((3u << 20) + 16, false, tuning(false, 64 << 10), false);
}

TEST_F(ShmCombineTest, TheSwitchTurnsItOff) {
  ShmTuning t = tuning();
  t.fused_reduce = false;
  auto endpoints = job(2, t);
  std::vector<std::byte> own(16);
  std::vector<std::byte> buffer(16);
  EXPECT_EQ(capability<CombiningReceive>(*endpoints[1])
                ->irecv_reduce(0, 1, 1, buffer, {own.data(), HM_FLOAT32, HM_SUM}),
            nullptr);
}

TEST_F(ShmCombineTest, PartElementsAreRefused) {
  auto endpoints = job(2);
  std::vector<std::byte> own(10);
  std::vector<std::byte> buffer(10);
  EXPECT_THROW(capability<CombiningReceive>(*endpoints[1])
                   ->irecv_reduce(0, 1, 1, buffer, {own.data(), HM_FLOAT32, HM_SUM}),
               Error);
}

}  // namespace
}  // namespace holmes::shm
