#include "bootstrap/store_protocol.hpp"

#include "core/bytes.hpp"

namespace holmes::store {
namespace {

std::vector<std::uint8_t> frame(ByteWriter& body) {
  ByteWriter out;
  out.put<std::uint32_t>(static_cast<std::uint32_t>(body.bytes().size()));
  out.put_bytes(body.bytes());
  return std::move(out.bytes());
}

}  // namespace

std::vector<std::uint8_t> encode_request(const Request& request) {
  ByteWriter body;
  body.put<std::uint8_t>(static_cast<std::uint8_t>(request.op));
  switch (request.op) {
    case Op::kSet:
      body.put_string(request.key).put_bytes(request.value);
      break;
    case Op::kGet:
      body.put<std::uint32_t>(request.timeout_ms).put_string(request.key);
      break;
    case Op::kAdd:
      body.put<std::uint64_t>(static_cast<std::uint64_t>(request.delta)).put_string(request.key);
      break;
    case Op::kCheck:
    case Op::kDelete:
      body.put_string(request.key);
      break;
    case Op::kPing:
      break;
  }
  return frame(body);
}

std::vector<std::uint8_t> encode_response(const Response& response) {
  ByteWriter body;
  body.put<std::uint8_t>(static_cast<std::uint8_t>(response.reply)).put_bytes(response.value);
  return frame(body);
}

std::optional<Request> decode_request(std::span<const std::uint8_t> body) {
  ByteReader in(body);
  Request request;
  const auto op = in.get<std::uint8_t>();
  switch (op) {
    case static_cast<std::uint8_t>(Op::kSet): {
      request.key = in.get_string(kMaxKeyBytes);
      const auto rest = in.rest();
      if (rest.size() > kMaxValueBytes) return std::nullopt;
      request.value.assign(rest.begin(), rest.end());
      break;
    }
    case static_cast<std::uint8_t>(Op::kGet):
      request.timeout_ms = in.get<std::uint32_t>();
      request.key = in.get_string(kMaxKeyBytes);
      break;
    case static_cast<std::uint8_t>(Op::kAdd):
      request.delta = static_cast<std::int64_t>(in.get<std::uint64_t>());
      request.key = in.get_string(kMaxKeyBytes);
      break;
    case static_cast<std::uint8_t>(Op::kCheck):
    case static_cast<std::uint8_t>(Op::kDelete):
      request.key = in.get_string(kMaxKeyBytes);
      break;
    case static_cast<std::uint8_t>(Op::kPing):
      break;
    default:
      return std::nullopt;
  }
  if (!in.ok() || !in.at_end()) return std::nullopt;
  request.op = static_cast<Op>(op);
  return request;
}

std::optional<Response> decode_response(std::span<const std::uint8_t> body) {
  ByteReader in(body);
  const auto reply = in.get<std::uint8_t>();
  if (!in.ok() || reply > static_cast<std::uint8_t>(Reply::kBadRequest)) return std::nullopt;
  Response response;
  response.reply = static_cast<Reply>(reply);
  const auto rest = in.rest();
  response.value.assign(rest.begin(), rest.end());
  return response;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kSet:
      return "SET";
    case Op::kGet:
      return "GET";
    case Op::kAdd:
      return "ADD";
    case Op::kCheck:
      return "CHECK";
    case Op::kDelete:
      return "DELETE";
    case Op::kPing:
      return "PING";
  }
  return "?";
}

}  // namespace holmes::store
