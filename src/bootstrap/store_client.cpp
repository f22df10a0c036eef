#include "bootstrap/store_client.hpp"

#include <thread>

#include "bootstrap/auth.hpp"
#include "bootstrap/store_protocol.hpp"
#include "core/bytes.hpp"
#include "core/parse.hpp"
#include "core/status.hpp"

namespace holmes {

namespace {

store::Request make_request(store::Op op, std::string_view key) {
  store::Request request;
  request.op = op;
  request.key = std::string(key);
  return request;
}

}  // namespace

struct StoreClient::Reply {
  store::Reply reply;
  std::vector<std::uint8_t> value;
};

StoreClient::StoreClient(std::string host, std::uint16_t port, std::string token,
                         const Deadline& deadline, std::chrono::milliseconds io_timeout)
    : host_(std::move(host)),
      port_(port),
      token_(std::move(token)),
      endpoint_(fmt::format("{}:{}", host_, port_)),
      io_timeout_(io_timeout) {
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    try {
      socket_ = Socket::connect(host_, port_, deadline);
      break;
    } catch (const Error& e) {
      if (e.status() != HM_ERR_TRANSPORT) throw;  // bad host name, or out of time
      if (deadline.remaining() <= backoff) {
        fail(HM_ERR_TIMEOUT, "no rendezvous store answered at {} in time: {}", endpoint_, e.what());
      }
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  handshake(deadline);
}

void StoreClient::handshake(const Deadline& deadline) {
  std::array<std::uint8_t, auth::Challenge::kWireBytes> challenge_bytes{};
  socket_.read_exact(challenge_bytes, deadline);
  auth::Challenge challenge;
  if (!auth::Challenge::decode(challenge_bytes, auth::Channel::kStore, challenge)) {
    fail(HM_ERR_AUTH, "{} is not a Holmes store (bad handshake)", endpoint_);
  }
  auth::Proof proof;
  proof.client_nonce = auth::random_nonce();
  proof.mac = auth::compute_mac(token_, auth::Role::kClient, auth::Channel::kStore,
                                challenge.server_nonce, proof.client_nonce, "store");
  socket_.write_all(proof.encode(), deadline);
  std::array<std::uint8_t, auth::Verdict::kWireBytes> verdict_bytes{};
  try {
    socket_.read_exact(verdict_bytes, deadline);
  } catch (const Error& e) {
    fail(HM_ERR_AUTH, "store at {} dropped the connection during authentication: {}", endpoint_,
         e.what());
  }
  const auto verdict = auth::Verdict::decode(verdict_bytes);
  if (!verdict.accepted) {
    fail(HM_ERR_AUTH, "store at {} refused this job token (HOLMES_TOKEN differs)", endpoint_);
  }
  const auto expected = auth::compute_mac(token_, auth::Role::kServer, auth::Channel::kStore,
                                          challenge.server_nonce, proof.client_nonce, "store");
  if (!auth::macs_equal(expected, verdict.mac)) {
    fail(HM_ERR_AUTH, "store at {} could not prove the job token: another job's store?", endpoint_);
  }
}

StoreClient::Reply StoreClient::call(const std::vector<std::uint8_t>& frame,
                                     const Deadline& deadline, const char* what,
                                     std::string_view key) {
  try {
    socket_.write_all(frame, deadline);
    std::array<std::uint8_t, 4> length_bytes{};
    socket_.read_exact(length_bytes, deadline);
    const auto length = load_le<std::uint32_t>(length_bytes.data());
    if (length == 0 || length > store::kMaxFrameBytes) {
      fail(HM_ERR_TRANSPORT, "bad reply length {}", length);
    }
    std::vector<std::uint8_t> body(length);
    socket_.read_exact(body, deadline);
    auto response = store::decode_response(body);
    if (!response) fail(HM_ERR_TRANSPORT, "malformed reply");
    if (response->reply == store::Reply::kBadRequest)
      fail(HM_ERR_INTERNAL, "store refused request");
    return {response->reply, std::move(response->value)};
  } catch (const Error& e) {
    fail(e.status(), "store {} '{}' at {}: {}", what, key, endpoint_, e.what());
  }
}

void StoreClient::set(std::string_view key, std::span<const std::uint8_t> value) {
  if (key.size() > store::kMaxKeyBytes || value.size() > store::kMaxValueBytes) {
    fail(HM_ERR_INVALID_ARGUMENT, "store key or value too large (key {} bytes, value {} bytes)",
         key.size(), value.size());
  }
  auto request = make_request(store::Op::kSet, key);
  request.value.assign(value.begin(), value.end());
  call(store::encode_request(request), Deadline::after(io_timeout_), "SET", key);
}

void StoreClient::set(std::string_view key, std::string_view value) {
  set(key, std::span(reinterpret_cast<const std::uint8_t*>(value.data()), value.size()));
}

std::vector<std::uint8_t> StoreClient::get(std::string_view key, const Deadline& deadline) {
  auto request = make_request(store::Op::kGet, key);
  const auto wait = std::min<std::int64_t>(deadline.remaining().count(), 0xffffffffLL);
  request.timeout_ms = static_cast<std::uint32_t>(wait);
  // The server answers TIMEOUT itself; give the reply a little slack on our side.
  const Deadline io_deadline(deadline.at() + std::chrono::seconds(10));
  auto reply = call(store::encode_request(request), io_deadline, "GET", key);
  if (reply.reply != store::Reply::kOk) {
    fail(HM_ERR_TIMEOUT, "store GET of '{}' at {}: key not set in time", key, endpoint_);
  }
  return std::move(reply.value);
}

std::string StoreClient::get_string(std::string_view key, const Deadline& deadline) {
  const auto value = get(key, deadline);
  return std::string(value.begin(), value.end());
}

std::int64_t StoreClient::add(std::string_view key, std::int64_t delta) {
  auto request = make_request(store::Op::kAdd, key);
  request.delta = delta;
  const auto reply = call(store::encode_request(request), Deadline::after(io_timeout_), "ADD", key);
  const std::string text(reply.value.begin(), reply.value.end());
  return parse_int(text, INT64_MIN, INT64_MAX, fmt::format("store counter '{}'", key));
}

bool StoreClient::check(std::string_view key) {
  auto request = make_request(store::Op::kCheck, key);
  return call(store::encode_request(request), Deadline::after(io_timeout_), "CHECK", key).reply ==
         store::Reply::kOk;
}

bool StoreClient::remove(std::string_view key) {
  auto request = make_request(store::Op::kDelete, key);
  return call(store::encode_request(request), Deadline::after(io_timeout_), "DELETE", key).reply ==
         store::Reply::kOk;
}

void StoreClient::ping() {
  call(store::encode_request(store::Request{}), Deadline::after(io_timeout_), "PING", "");
}

}  // namespace holmes
