// Tests of src/bootstrap/store_protocol.hpp: the store's request/response framing. The decoder
// reads bytes from unauthenticated-then-authenticated peers, so besides round trips it must
// reject every malformed body, and a random-bytes fuzz loop must never crash it or make it
// accept something that does not re-encode to the same bytes.
#include "bootstrap/store_protocol.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace holmes::store {
namespace {

using Bytes = std::vector<std::uint8_t>;

// The body of an encoded frame, after checking that the length prefix matches it.
Bytes body_of(const Bytes& frame) {
  EXPECT_GE(frame.size(), 4u);
  if (frame.size() < 4) return {};
  const std::uint32_t length =
      static_cast<std::uint32_t>(frame[0]) | static_cast<std::uint32_t>(frame[1]) << 8 |
      static_cast<std::uint32_t>(frame[2]) << 16 | static_cast<std::uint32_t>(frame[3]) << 24;
  EXPECT_EQ(length, frame.size() - 4) << "length prefix disagrees with the frame";
  return Bytes(frame.begin() + 4, frame.end());
}

void append_u32(Bytes& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

Request make(Op op, std::string key = {}, Bytes value = {}, std::int64_t delta = 0,
             std::uint32_t timeout_ms = 0) {
  Request r;
  r.op = op;
  r.key = std::move(key);
  r.value = std::move(value);
  r.delta = delta;
  r.timeout_ms = timeout_ms;
  return r;
}

void expect_same_request(const Request& expected, const Request& actual) {
  EXPECT_EQ(static_cast<int>(actual.op), static_cast<int>(expected.op));
  EXPECT_EQ(actual.key, expected.key);
  EXPECT_EQ(actual.value, expected.value);
  EXPECT_EQ(actual.delta, expected.delta);
  EXPECT_EQ(actual.timeout_ms, expected.timeout_ms);
}

// A request of every op, with fields that only the op carries set (others left at defaults,
// which is what a decoder produces for them).
std::vector<Request> sample_requests() {
  return {
      make(Op::kSet, "rank/3/addr", {'1', '0', '.', '0', 0, 0xff}),
      make(Op::kSet, "", {}),  // empty key and value are legal
      make(Op::kSet, std::string(kMaxKeyBytes, 'k'), Bytes(1000, 0x42)),
      make(Op::kGet, "barrier/1", {}, 0, 30000),
      make(Op::kGet, "k", {}, 0, 0xffffffffu),
      make(Op::kAdd, "counter", {}, -5),
      make(Op::kAdd, "counter", {}, INT64_MIN),
      make(Op::kAdd, "counter", {}, INT64_MAX),
      make(Op::kCheck, "some key with spaces"),
      make(Op::kDelete, std::string("nul\0inside", 10)),
      make(Op::kPing),
  };
}

TEST(StoreProtocol, EveryRequestRoundTrips) {
  for (const Request& request : sample_requests()) {
    SCOPED_TRACE(op_name(request.op));
    const Bytes body = body_of(encode_request(request));
    const auto decoded = decode_request(body);
    ASSERT_TRUE(decoded.has_value());
    expect_same_request(request, *decoded);
  }
}

// The layout is what the header documents, byte for byte (little-endian, u32-prefixed key).
TEST(StoreProtocol, WireLayoutMatchesTheDocumentation) {
  const Bytes get = encode_request(make(Op::kGet, "ab", {}, 0, 0x01020304));
  EXPECT_EQ(get, (Bytes{11, 0, 0, 0, 2, 0x04, 0x03, 0x02, 0x01, 2, 0, 0, 0, 'a', 'b'}));
  const Bytes add = encode_request(make(Op::kAdd, "c", {}, -2));
  EXPECT_EQ(add, (Bytes{14, 0, 0, 0, 3, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0,
                        'c'}));
  const Bytes set = encode_request(make(Op::kSet, "k", {9, 8}));
  EXPECT_EQ(set, (Bytes{8, 0, 0, 0, 1, 1, 0, 0, 0, 'k', 9, 8}));
  EXPECT_EQ(encode_request(make(Op::kPing)), (Bytes{1, 0, 0, 0, 6}));
  EXPECT_EQ(encode_request(make(Op::kCheck, "x")), (Bytes{6, 0, 0, 0, 4, 1, 0, 0, 0, 'x'}));
  EXPECT_EQ(encode_request(make(Op::kDelete, "x")), (Bytes{6, 0, 0, 0, 5, 1, 0, 0, 0, 'x'}));
  EXPECT_EQ(encode_response({Reply::kTimeout, {}}), (Bytes{1, 0, 0, 0, 2}));
  EXPECT_EQ(encode_response({Reply::kOk, {'4', '2'}}), (Bytes{3, 0, 0, 0, 0, '4', '2'}));
}

TEST(StoreProtocol, EveryResponseRoundTrips) {
  for (Reply reply : {Reply::kOk, Reply::kNotFound, Reply::kTimeout, Reply::kBadRequest}) {
    for (const Bytes& value : {Bytes{}, Bytes{0}, Bytes{'h', 'i', 0xff}}) {
      const Bytes body = body_of(encode_response({reply, value}));
      const auto decoded = decode_response(body);
      ASSERT_TRUE(decoded.has_value()) << static_cast<int>(reply);
      EXPECT_EQ(decoded->reply, reply);
      EXPECT_EQ(decoded->value, value);
    }
  }
}

TEST(StoreProtocol, DecodeResponseRejectsEmptyAndUnknownReplies) {
  EXPECT_FALSE(decode_response(Bytes{}).has_value());
  for (int reply : {4, 5, 0x80, 0xff}) {
    EXPECT_FALSE(decode_response(Bytes{static_cast<std::uint8_t>(reply), 'x'}).has_value())
        << reply;
  }
}

TEST(StoreProtocol, DecodeRejectsEmptyBody) { EXPECT_FALSE(decode_request(Bytes{}).has_value()); }

TEST(StoreProtocol, DecodeRejectsUnknownOps) {
  for (int op : {0, 7, 8, 0x7f, 0xff}) {
    EXPECT_FALSE(decode_request(Bytes{static_cast<std::uint8_t>(op)}).has_value()) << op;
    // Even followed by what would be a valid key for a known op.
    EXPECT_FALSE(decode_request(Bytes{static_cast<std::uint8_t>(op), 1, 0, 0, 0, 'k'}).has_value())
        << op;
  }
}

// Every proper prefix of a valid body is truncated somewhere in a fixed field or the key and
// must be refused. SET is the exception once its key is complete: the value is "the rest", so
// cutting the value shortens it instead of breaking the frame.
TEST(StoreProtocol, DecodeRejectsTruncatedFields) {
  for (const Request& request : sample_requests()) {
    SCOPED_TRACE(op_name(request.op));
    const Bytes body = body_of(encode_request(request));
    std::size_t first_valid_prefix = body.size();
    if (request.op == Op::kSet) first_valid_prefix = 1 + 4 + request.key.size();
    for (std::size_t cut = 0; cut < body.size(); ++cut) {
      const auto decoded = decode_request(std::span(body).first(cut));
      if (cut < first_valid_prefix) {
        EXPECT_FALSE(decoded.has_value()) << "prefix of " << cut << " bytes accepted";
      } else {
        ASSERT_TRUE(decoded.has_value()) << "SET prefix of " << cut << " bytes refused";
        EXPECT_EQ(decoded->value.size(), cut - first_valid_prefix);
      }
    }
  }
}

TEST(StoreProtocol, DecodeRejectsKeyLengthBeyondTheBody) {
  Bytes body{static_cast<std::uint8_t>(Op::kCheck)};
  append_u32(body, 10);
  body.insert(body.end(), {'a', 'b', 'c'});
  EXPECT_FALSE(decode_request(body).has_value());
  Bytes huge{static_cast<std::uint8_t>(Op::kSet)};
  append_u32(huge, 0xffffffffu);
  huge.push_back('a');
  EXPECT_FALSE(decode_request(huge).has_value());
}

TEST(StoreProtocol, KeyOfMaxLengthIsAcceptedAndOneMoreIsRejected) {
  for (Op op : {Op::kSet, Op::kGet, Op::kAdd, Op::kCheck, Op::kDelete}) {
    SCOPED_TRACE(op_name(op));
    const Bytes ok = body_of(encode_request(make(op, std::string(kMaxKeyBytes, 'a'))));
    ASSERT_TRUE(decode_request(ok).has_value());
    EXPECT_EQ(decode_request(ok)->key.size(), kMaxKeyBytes);
    // The encoder does not police sizes; the decoder on the other side must.
    const Bytes too_long = body_of(encode_request(make(op, std::string(kMaxKeyBytes + 1, 'a'))));
    EXPECT_FALSE(decode_request(too_long).has_value());
  }
}

TEST(StoreProtocol, SetValueOverTheLimitIsRejected) {
  Bytes value(kMaxValueBytes, 0x11);
  const Bytes at_limit = body_of(encode_request(make(Op::kSet, "k", value)));
  const auto decoded = decode_request(at_limit);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->value.size(), kMaxValueBytes);
  value.push_back(0x11);
  EXPECT_FALSE(decode_request(body_of(encode_request(make(Op::kSet, "k", value)))).has_value());
}

TEST(StoreProtocol, DecodeRejectsTrailingBytes) {
  for (const Request& request : sample_requests()) {
    if (request.op == Op::kSet) continue;  // SET's value absorbs everything after the key
    SCOPED_TRACE(op_name(request.op));
    Bytes body = body_of(encode_request(request));
    body.push_back(0);
    EXPECT_FALSE(decode_request(body).has_value());
    body.back() = 'x';
    body.push_back('y');
    EXPECT_FALSE(decode_request(body).has_value());
  }
}

TEST(StoreProtocol, OpNames) {
  EXPECT_STREQ(op_name(Op::kSet), "SET");
  EXPECT_STREQ(op_name(Op::kGet), "GET");
  EXPECT_STREQ(op_name(Op::kAdd), "ADD");
  EXPECT_STREQ(op_name(Op::kCheck), "CHECK");
  EXPECT_STREQ(op_name(Op::kDelete), "DELETE");
  EXPECT_STREQ(op_name(Op::kPing), "PING");
  EXPECT_STREQ(op_name(static_cast<Op>(0)), "?");
}

// Random bodies never crash the decoder, and whatever it accepts is canonical: encoding the
// decoded request reproduces the body byte for byte, with a correct length prefix. Bodies are
// biased towards valid ops and short key lengths so that many are accepted and every branch of
// the decoder runs.
TEST(StoreProtocol, RandomBodiesFuzz) {
  std::mt19937 rng(424242);
  std::uniform_int_distribution<int> length_dist(0, 64);
  std::uniform_int_distribution<int> byte_dist(0, 255);
  std::uniform_int_distribution<int> choice(0, 3);
  std::uniform_int_distribution<int> op_dist(1, 6);
  std::uniform_int_distribution<int> rare(0, 15);
  std::size_t accepted = 0;
  int accepted_per_op[7] = {};
  for (int iteration = 0; iteration < 20000; ++iteration) {
    Bytes body(static_cast<std::size_t>(length_dist(rng)));
    for (auto& b : body) b = static_cast<std::uint8_t>(byte_dist(rng));
    if (!body.empty() && choice(rng) != 0) body[0] = static_cast<std::uint8_t>(op_dist(rng));
    if (!body.empty() && rare(rng) == 0) body.resize(1);  // the only size PING accepts
    // Plant a small, plausible key length where each op keeps it.
    if (choice(rng) != 0 && !body.empty()) {
      std::size_t at = 1;
      if (body[0] == static_cast<std::uint8_t>(Op::kGet)) at = 5;
      if (body[0] == static_cast<std::uint8_t>(Op::kAdd)) at = 9;
      if (body.size() >= at + 4) {
        const std::size_t room = body.size() - at - 4;
        const std::uint32_t key_length =
            room == 0 ? 0 : static_cast<std::uint32_t>(byte_dist(rng)) % (room + 1);
        for (int i = 0; i < 4; ++i) body[at + i] = static_cast<std::uint8_t>(key_length >> (8 * i));
        // Usually make the key the whole remainder (what GET/ADD/CHECK/DELETE need).
        if (choice(rng) != 0 && body[0] != static_cast<std::uint8_t>(Op::kSet)) {
          body.resize(at + 4 + key_length);
        }
      }
    }
    const auto request = decode_request(body);
    const auto response = decode_response(body);
    if (response) {
      ASSERT_FALSE(body.empty());
      EXPECT_EQ(body_of(encode_response(*response)), body);
    }
    if (!request) continue;
    ++accepted;
    ++accepted_per_op[static_cast<int>(request->op)];
    ASSERT_LE(request->key.size(), kMaxKeyBytes);
    const Bytes frame = encode_request(*request);
    ASSERT_EQ(body_of(frame), body) << "iteration " << iteration;
    const auto again = decode_request(body_of(frame));
    ASSERT_TRUE(again.has_value());
    expect_same_request(*request, *again);
  }
  // The loop is only worth something if it exercised every op's accepting path.
  for (int op = 1; op <= 6; ++op) EXPECT_GT(accepted_per_op[op], 20) << "op " << op;
  EXPECT_GT(accepted, 1000u);
}

}  // namespace
}  // namespace holmes::store
