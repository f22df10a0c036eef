#include "targets.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "bootstrap/auth.hpp"
#include "bootstrap/store_protocol.hpp"
#include "communicator/peer_card.hpp"
#include "core/bytes.hpp"
#include "core/parse.hpp"
#include "core/status.hpp"
#include "planner/model_spec.hpp"
#include "topology/topology_file.hpp"
#include "transports/tcp/frame.hpp"

namespace holmes::fuzz {
namespace {

void expect(bool condition, const char* what) {
  if (!condition) throw Finding(what);
}

std::string_view as_text(Input data) {
  return {reinterpret_cast<const char*>(data.data()), data.size()};
}

// Splits `data` into frames (u32 little-endian body length + body) as both ends of the store
// read them, stopping where a reader would drop the connection (a length of 0 or beyond
// kMaxFrameBytes) or wait for more bytes (a truncated frame). `on_frame` gets the whole frame
// and its body.
template <typename OnFrame>
void for_each_frame(Input data, OnFrame on_frame) {
  while (data.size() >= 4) {
    const auto length = load_le<std::uint32_t>(data.data());
    if (length == 0 || length > store::kMaxFrameBytes || data.size() - 4 < length) return;
    on_frame(data.first(4 + length), data.subspan(4, length));
    data = data.subspan(4 + length);
  }
}

bool same_bytes(const std::vector<std::uint8_t>& a, Input b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

void frame_header(Input data) {
  std::array<std::uint8_t, tcp::kFrameHeaderBytes> bytes{};
  std::copy_n(data.begin(), std::min(data.size(), bytes.size()), bytes.begin());
  const auto header = tcp::FrameHeader::decode(bytes);
  if (!header) return;
  // What the receiver relies on before it touches a buffer.
  expect(header->total <= tcp::kMaxMessageBytes, "frame: total above the message limit");
  expect(header->length <= tcp::kMaxFragmentBytes, "frame: length above the fragment limit");
  expect(header->offset <= header->total && header->length <= header->total - header->offset,
         "frame: fragment reaches past the end of its message");
  expect(header->encode() == bytes, "frame: decoded header does not encode to the same bytes");
}

void store_request(Input data) {
  for_each_frame(data, [](Input frame, Input body) {
    const auto request = store::decode_request(body);
    if (!request) return;  // the server answers BAD_REQUEST and drops the client
    expect(request->key.size() <= store::kMaxKeyBytes, "store request: key above the limit");
    expect(request->value.size() <= store::kMaxValueBytes, "store request: value above the limit");
    expect(same_bytes(store::encode_request(*request), frame),
           "store request: decoded request does not encode to the same frame");
  });
}

void store_reply(Input data) {
  // The handshake, as the client reads it before any reply.
  if (data.size() >= auth::Challenge::kWireBytes) {
    auth::Challenge challenge;
    auth::Challenge::decode(data.first<auth::Challenge::kWireBytes>(), auth::Channel::kStore,
                            challenge);
  }
  if (data.size() >= auth::Verdict::kWireBytes) {
    const auto verdict = auth::Verdict::decode(data.first<auth::Verdict::kWireBytes>());
    expect(verdict.accepted == (data[0] == 1), "verdict: accepted by a byte other than 1");
  }
  for_each_frame(data, [](Input frame, Input body) {
    const auto response = store::decode_response(body);
    if (!response) return;  // the client fails the call with HM_ERR_TRANSPORT
    expect(same_bytes(store::encode_response(*response), frame),
           "store reply: decoded reply does not encode to the same frame");
    // What the client does with a value: an ADD reply is a decimal counter, and the values ranks
    // publish during wiring are peer cards. Both refuse bad text with holmes::Error.
    const std::string text(response->value.begin(), response->value.end());
    try {
      parse_int(text, INT64_MIN, INT64_MAX, "store counter");
    } catch (const Error&) {
    }
    try {
      const auto card = detail::PeerCard::decode(text, 1);
      expect(card.addresses.size() == std::size(kAllTransportKinds),
             "peer card: address table of the wrong size");
    } catch (const Error&) {
    }
  });
}

void topology_file(Input data) {
  try {
    const auto topology = topology::parse_topology_yaml(as_text(data), "<fuzz>");
    try {
      topology.validate();
    } catch (const Error& e) {
      throw Finding(std::string("topology file: parsed topology fails validate(): ") + e.what());
    }
  } catch (const Error&) {
  }
}

void model_file(Input data) {
  try {
    const auto model = planner::parse_model_yaml(as_text(data), "<fuzz>");
    try {
      model.validate();
    } catch (const Error& e) {
      throw Finding(std::string("model file: parsed model fails validate(): ") + e.what());
    }
  } catch (const Error&) {
  }
}

std::span<const Target> all_targets() {
  static constexpr Target kTargets[] = {
      {"frame_header", frame_header}, {"store_request", store_request},
      {"store_reply", store_reply},   {"topology_file", topology_file},
      {"model_file", model_file},
  };
  return kTargets;
}

}  // namespace holmes::fuzz
