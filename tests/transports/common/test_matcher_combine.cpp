// Receives that combine (Matcher::post with a ReceiveCombine): the buffer ends as
// reduce(in, message) whatever way the message comes (one fragment or several, in any order, as
// unexpected data first, through land()/landed() as tcp and cross-memory attach deliver it,
// with fragments that split elements), and never as anything else (a mismatch leaves it alone).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "check_data.hpp"
#include "core/dtype.hpp"
#include "core/reduce.hpp"
#include "transports/matcher.hpp"

namespace holmes {
namespace {

constexpr std::uint32_t kSignature = 0x5151;
constexpr std::uint64_t kTag = 7;
constexpr int kPeer = 1;

Matcher make_matcher() {
  return Matcher([](int peer) { return "rank " + std::to_string(peer); });
}

bool is_signed(hm_dtype_t dtype) {
  return dtype != HM_UINT8 && dtype != HM_UINT32 && dtype != HM_UINT64;
}

// Writes `exact` (a small integer, exact in every type; a float type gets -0.0 where a product
// with zero has a negative factor, as IEEE arithmetic gives) as element `i` of `dtype`.
void put(hm_dtype_t dtype, std::vector<std::byte>& buffer, std::size_t i, double exact) {
  check::encode(exact, dtype, buffer.data() + i * dtype_size(dtype));
}

// The operands: this rank's input and the message, small values (signed types get negatives), so
// that every sum and product is exact in every type and the expected values need no rounding.
long long own_value(hm_dtype_t dtype, std::size_t i) {
  return static_cast<long long>(i % 7) + (is_signed(dtype) ? -3 : 1);
}
long long received_value(hm_dtype_t dtype, std::size_t i) {
  return static_cast<long long>(i % 5) + (is_signed(dtype) ? -2 : 2);
}
double combined_value(hm_op_t op, long long a, long long b) {
  const auto x = static_cast<double>(a);
  const auto y = static_cast<double>(b);
  switch (op) {
    case HM_SUM:
    case HM_AVG:  // reduces as a sum; the collective divides at the end
      return x + y;
    case HM_PROD:
      return x * y;
    case HM_MIN:
      return std::min(x, y);
    case HM_MAX:
      return std::max(x, y);
    default:
      return 0;
  }
}

struct Operands {
  std::vector<std::byte> in;
  std::vector<std::byte> message;
  std::vector<std::byte> expected;
};

Operands make_operands(hm_dtype_t dtype, hm_op_t op, std::size_t count) {
  const std::size_t bytes = count * dtype_size(dtype);
  Operands o{std::vector<std::byte>(bytes), std::vector<std::byte>(bytes),
             std::vector<std::byte>(bytes)};
  for (std::size_t i = 0; i < count; ++i) {
    const long long a = own_value(dtype, i);
    const long long b = received_value(dtype, i);
    put(dtype, o.in, i, static_cast<double>(a));
    put(dtype, o.message, i, static_cast<double>(b));
    put(dtype, o.expected, i, combined_value(op, a, b));
  }
  return o;
}

// A combining receive of `o.in.size()` bytes into a buffer that starts as 0xEE bytes (the
// combine must overwrite every byte, never add to what was there).
struct CombiningReceive {
  std::vector<std::byte> buffer;
  CompletionPtr request = std::make_shared<Completion>();
  bool finished_at_post = false;

  CombiningReceive(Matcher& m, const Operands& o, hm_dtype_t dtype, hm_op_t op,
                   std::uint32_t signature = kSignature)
      : buffer(o.in.size(), std::byte{0xEE}) {
    finished_at_post =
        m.post(kPeer, kTag, signature, buffer, request, ReceiveCombine{o.in.data(), dtype, op});
  }
};

FragmentHeader fragment(std::size_t total, std::size_t offset, std::size_t length,
                        std::uint32_t signature = kSignature) {
  return FragmentHeader{kTag, signature, total, offset, length};
}

// Delivers bytes [offset, offset + length) of `message` the way shm does (from memory).
void deliver(Matcher& m, const std::vector<std::byte>& message, std::size_t offset,
             std::size_t length) {
  ASSERT_TRUE(m.deliver(kPeer, fragment(message.size(), offset, length),
                        {message.data() + offset, length}));
}

// Delivers them the way tcp and cross-memory attach do: land, write where told, landed.
void land(Matcher& m, const std::vector<std::byte>& message, std::size_t offset, std::size_t length,
          const std::vector<std::byte>& receive_buffer) {
  const auto h = fragment(message.size(), offset, length);
  const auto landing = m.land(kPeer, h);
  ASSERT_TRUE(landing.has_value());
  ASSERT_NE(landing->target, nullptr);
  // Never straight into the receive buffer: it must only ever hold combined values.
  EXPECT_FALSE(landing->target >= receive_buffer.data() &&
               landing->target < receive_buffer.data() + receive_buffer.size());
  std::memcpy(landing->target, message.data() + offset, length);
  m.landed(kPeer, h, *landing);
}

constexpr hm_dtype_t kDtypes[] = {HM_INT8,   HM_UINT8,   HM_INT32,    HM_UINT32,  HM_INT64,
                                  HM_UINT64, HM_FLOAT16, HM_BFLOAT16, HM_FLOAT32, HM_FLOAT64};
constexpr hm_op_t kOps[] = {HM_SUM, HM_PROD, HM_MIN, HM_MAX, HM_AVG};

TEST(MatcherCombine, EveryDtypeAndOpInOneFragment) {
  for (const hm_dtype_t dtype : kDtypes) {
    for (const hm_op_t op : kOps) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + op_name(op));
      Matcher m = make_matcher();
      const Operands o = make_operands(dtype, op, 37);
      const auto in_before = o.in;
      CombiningReceive r(m, o, dtype, op);
      ASSERT_FALSE(r.finished_at_post);
      deliver(m, o.message, 0, o.message.size());
      ASSERT_TRUE(r.request->done());
      EXPECT_EQ(r.request->status(), HM_SUCCESS) << r.request->message();
      EXPECT_EQ(r.buffer, o.expected);
      EXPECT_EQ(o.in, in_before);
    }
  }
}

TEST(MatcherCombine, FragmentsInAnyOrder) {
  for (const hm_dtype_t dtype : {HM_FLOAT32, HM_INT64, HM_BFLOAT16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const std::size_t es = dtype_size(dtype);
    Matcher m = make_matcher();
    const Operands o = make_operands(dtype, HM_SUM, 60);
    CombiningReceive r(m, o, dtype, HM_SUM);
    // Bytes [40, 60), [0, 20), [20, 40) elements.
    deliver(m, o.message, 40 * es, 20 * es);
    deliver(m, o.message, 0, 20 * es);
    EXPECT_FALSE(r.request->done());
    deliver(m, o.message, 20 * es, 20 * es);
    ASSERT_TRUE(r.request->done());
    EXPECT_EQ(r.request->status(), HM_SUCCESS);
    EXPECT_EQ(r.buffer, o.expected);
  }
}

TEST(MatcherCombine, InPlaceWhenTheInputIsTheBuffer) {
  Matcher m = make_matcher();
  Operands o = make_operands(HM_INT32, HM_MAX, 50);
  auto request = std::make_shared<Completion>();
  // The collective's in-place case: the buffer holds this rank's input and ends as the result.
  std::vector<std::byte> buffer = o.in;
  ASSERT_FALSE(m.post(kPeer, kTag, kSignature, buffer, request,
                      ReceiveCombine{buffer.data(), HM_INT32, HM_MAX}));
  deliver(m, o.message, 100, 100);
  deliver(m, o.message, 0, 100);
  ASSERT_TRUE(request->done());
  EXPECT_EQ(buffer, o.expected);
}

TEST(MatcherCombine, UnexpectedThenPosted) {
  Matcher m = make_matcher();
  const Operands o = make_operands(HM_FLOAT64, HM_SUM, 32);
  deliver(m, o.message, 0, o.message.size());
  EXPECT_EQ(m.unexpected_bytes(), o.message.size());
  CombiningReceive r(m, o, HM_FLOAT64, HM_SUM);
  EXPECT_TRUE(r.finished_at_post);
  EXPECT_EQ(r.request->status(), HM_SUCCESS);
  EXPECT_EQ(r.buffer, o.expected);
  EXPECT_EQ(m.unexpected_bytes(), 0u);
}

TEST(MatcherCombine, PartlyUnexpectedThenPostedThenTheRest) {
  Matcher m = make_matcher();
  const Operands o = make_operands(HM_UINT8, HM_PROD, 64);
  deliver(m, o.message, 16, 16);
  deliver(m, o.message, 48, 16);
  CombiningReceive r(m, o, HM_UINT8, HM_PROD);
  EXPECT_FALSE(r.finished_at_post);
  deliver(m, o.message, 0, 16);
  EXPECT_FALSE(r.request->done());
  deliver(m, o.message, 32, 16);
  ASSERT_TRUE(r.request->done());
  EXPECT_EQ(r.buffer, o.expected);
}

TEST(MatcherCombine, AnotherSignatureOrSizeLeavesTheBufferAlone) {
  {
    Matcher m = make_matcher();
    const Operands o = make_operands(HM_FLOAT32, HM_SUM, 8);
    CombiningReceive r(m, o, HM_FLOAT32, HM_SUM);
    ASSERT_TRUE(m.deliver(kPeer, fragment(32, 0, 32, kSignature + 1), o.message));
    ASSERT_TRUE(r.request->done());
    EXPECT_EQ(r.request->status(), HM_ERR_MISMATCH);
    EXPECT_EQ(r.buffer, std::vector<std::byte>(32, std::byte{0xEE}));
  }
  {
    Matcher m = make_matcher();
    const Operands o = make_operands(HM_FLOAT32, HM_SUM, 8);
    CombiningReceive r(m, o, HM_FLOAT32, HM_SUM);
    const std::vector<std::byte> longer(36);
    ASSERT_TRUE(m.deliver(kPeer, fragment(36, 0, 36), longer));
    EXPECT_EQ(r.request->status(), HM_ERR_MISMATCH);
    EXPECT_EQ(r.buffer, std::vector<std::byte>(32, std::byte{0xEE}));
  }
  {
    // Kept as unexpected data first, then refused when posted.
    Matcher m = make_matcher();
    const Operands o = make_operands(HM_FLOAT32, HM_SUM, 8);
    ASSERT_TRUE(m.deliver(kPeer, fragment(32, 0, 32, kSignature + 1), o.message));
    CombiningReceive r(m, o, HM_FLOAT32, HM_SUM);
    EXPECT_TRUE(r.finished_at_post);
    EXPECT_EQ(r.request->status(), HM_ERR_MISMATCH);
    EXPECT_EQ(r.buffer, std::vector<std::byte>(32, std::byte{0xEE}));
  }
}

TEST(MatcherCombine, FragmentsThatSplitElements) {
  // float64: fragments end inside elements, in any order, some whole-element ones among them
  // (those are combined at once, the others when the message is complete).
  const std::vector<std::vector<std::pair<std::size_t, std::size_t>>> orders = {
      {{0, 13}, {13, 27}, {40, 5}, {45, 35}},
      {{45, 35}, {13, 27}, {0, 13}, {40, 5}},
      {{16, 5}, {0, 16}, {21, 59}},
      {{64, 16}, {3, 61}, {0, 3}},
  };
  for (std::size_t k = 0; k < orders.size(); ++k) {
    SCOPED_TRACE(k);
    Matcher m = make_matcher();
    const Operands o = make_operands(HM_FLOAT64, HM_SUM, 10);
    CombiningReceive r(m, o, HM_FLOAT64, HM_SUM);
    for (std::size_t i = 0; i < orders[k].size(); ++i) {
      EXPECT_FALSE(r.request->done());
      deliver(m, o.message, orders[k][i].first, orders[k][i].second);
    }
    ASSERT_TRUE(r.request->done());
    EXPECT_EQ(r.request->status(), HM_SUCCESS);
    EXPECT_EQ(r.buffer, o.expected);
  }
}

TEST(MatcherCombine, FragmentsThatSplitElementsKeptAsUnexpected) {
  Matcher m = make_matcher();
  const Operands o = make_operands(HM_FLOAT16, HM_MIN, 9);  // 18 bytes
  deliver(m, o.message, 7, 11);
  CombiningReceive r(m, o, HM_FLOAT16, HM_MIN);
  EXPECT_FALSE(r.finished_at_post);
  deliver(m, o.message, 0, 7);
  ASSERT_TRUE(r.request->done());
  EXPECT_EQ(r.buffer, o.expected);
}

TEST(MatcherCombine, LandedByTheTransport) {
  // tcp and cross-memory attach write fragments themselves (land, then landed): they go through
  // the receive's bounce buffer and are combined from there.
  Matcher m = make_matcher();
  const Operands o = make_operands(HM_INT32, HM_SUM, 40);  // 160 bytes
  CombiningReceive r(m, o, HM_INT32, HM_SUM);
  land(m, o.message, 80, 80, r.buffer);
  land(m, o.message, 0, 42, r.buffer);  // splits element 10
  EXPECT_FALSE(r.request->done());
  land(m, o.message, 42, 38, r.buffer);
  ASSERT_TRUE(r.request->done());
  EXPECT_EQ(r.request->status(), HM_SUCCESS);
  EXPECT_EQ(r.buffer, o.expected);
}

TEST(MatcherCombine, AReceiveThatFailsWhileItsFragmentIsWrittenIsLeftAlone) {
  Matcher m = make_matcher();
  const Operands o = make_operands(HM_INT32, HM_SUM, 4);
  CombiningReceive r(m, o, HM_INT32, HM_SUM);
  const auto h = fragment(16, 0, 16);
  const auto landing = m.land(kPeer, h);
  ASSERT_TRUE(landing.has_value());
  m.fail_peer(kPeer, HM_ERR_PEER_FAILED, "gone");
  EXPECT_EQ(r.request->status(), HM_ERR_PEER_FAILED);
  // The transport finishes writing the fragment it had started: the memory is still valid.
  std::memcpy(landing->target, o.message.data(), 16);
  m.landed(kPeer, h, *landing);
  EXPECT_EQ(r.buffer, std::vector<std::byte>(16, std::byte{0xEE}));
}

TEST(MatcherCombine, KeepsTheOperandOrderOfTheCollectives) {
  // reduce(in, received): with two NaNs of different payloads the kernels return the first
  // operand's (quieted), so the order shows. The collectives reduce in this order themselves.
  const float own = std::bit_cast<float>(0x7fc00001u);
  const float theirs = std::bit_cast<float>(0x7fc00002u);
  std::vector<std::byte> in(4);
  std::vector<std::byte> message(4);
  std::memcpy(in.data(), &own, 4);
  std::memcpy(message.data(), &theirs, 4);
  std::vector<std::byte> forward(4);
  std::vector<std::byte> backward(4);
  reduce(HM_FLOAT32, HM_SUM, forward.data(), in.data(), message.data(), 1);
  reduce(HM_FLOAT32, HM_SUM, backward.data(), message.data(), in.data(), 1);
  ASSERT_NE(forward, backward) << "the kernels do not show the order on this machine";

  Matcher m = make_matcher();
  std::vector<std::byte> buffer(4);
  auto request = std::make_shared<Completion>();
  ASSERT_FALSE(m.post(kPeer, kTag, kSignature, buffer, request,
                      ReceiveCombine{in.data(), HM_FLOAT32, HM_SUM}));
  deliver(m, message, 0, 4);
  ASSERT_TRUE(request->done());
  EXPECT_EQ(buffer, forward);
}

TEST(MatcherCombine, ABufferOfPartElementsIsRefused) {
  Matcher m = make_matcher();
  std::vector<std::byte> in(10);
  std::vector<std::byte> buffer(10);
  auto request = std::make_shared<Completion>();
  EXPECT_TRUE(m.post(kPeer, kTag, kSignature, buffer, request,
                     ReceiveCombine{in.data(), HM_FLOAT32, HM_SUM}));
  EXPECT_EQ(request->status(), HM_ERR_INVALID_ARGUMENT);
}

TEST(MatcherCombine, PlainReceivesStillCopy) {
  Matcher m = make_matcher();
  const Operands o = make_operands(HM_INT32, HM_SUM, 4);
  std::vector<std::byte> buffer(16);
  auto request = std::make_shared<Completion>();
  ASSERT_FALSE(m.post(kPeer, kTag, kSignature, buffer, request));
  deliver(m, o.message, 0, 16);
  ASSERT_TRUE(request->done());
  EXPECT_EQ(buffer, o.message);
}

}  // namespace
}  // namespace holmes
