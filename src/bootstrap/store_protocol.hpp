// The rendezvous store's wire protocol (after the auth handshake). Every message is a frame:
//   u32 body length | body
// Request bodies:  u8 op | fields; response bodies: u8 reply | value bytes.
//   SET    key(str) value(rest)          -> OK
//   GET    timeout_ms(u32) key(str)      -> OK value | TIMEOUT     (waits until the key exists)
//   ADD    delta(i64) key(str)           -> OK decimal text of the new value
//   CHECK  key(str)                      -> OK "1" | NOT_FOUND
//   DELETE key(str)                      -> OK | NOT_FOUND
//   PING                                 -> OK
// str = u32 length + bytes. Decoders reject anything malformed or over the limits below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace holmes::store {

enum class Op : std::uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kDelete = 5, kPing = 6 };
enum class Reply : std::uint8_t { kOk = 0, kNotFound = 1, kTimeout = 2, kBadRequest = 3 };

constexpr std::size_t kMaxKeyBytes = 4096;
constexpr std::size_t kMaxValueBytes = 64u << 20;
constexpr std::size_t kMaxFrameBytes = kMaxValueBytes + kMaxKeyBytes + 64;

struct Request {
  Op op = Op::kPing;
  std::string key;
  std::vector<std::uint8_t> value;  // SET
  std::int64_t delta = 0;           // ADD
  std::uint32_t timeout_ms = 0;     // GET
};

struct Response {
  Reply reply = Reply::kOk;
  std::vector<std::uint8_t> value;
};

// Whole frames, length prefix included.
std::vector<std::uint8_t> encode_request(const Request& request);
std::vector<std::uint8_t> encode_response(const Response& response);

// Bodies only (the length prefix already consumed); nullopt when malformed.
std::optional<Request> decode_request(std::span<const std::uint8_t> body);
std::optional<Response> decode_response(std::span<const std::uint8_t> body);

const char* op_name(Op op);

}  // namespace holmes::store
