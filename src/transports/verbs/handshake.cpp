#include "transports/verbs/handshake.hpp"

#include <fmt/format.h>

#include "core/bytes.hpp"
#include "core/status.hpp"
#include "transports/verbs/qp_info.hpp"

namespace holmes::verbs {

std::vector<std::uint8_t> encode_hello(const auth::Proof& proof, std::uint32_t rank,
                                       std::span<const std::uint8_t> info) {
  ByteWriter out;
  out.put_bytes(proof.encode());
  out.put<std::uint32_t>(kHelloMagic);
  out.put<std::uint32_t>(rank);
  out.put<std::uint32_t>(static_cast<std::uint32_t>(info.size()));
  out.put_bytes(info);
  return std::move(out.bytes());
}

HelloPrefix decode_hello_prefix(std::span<const std::uint8_t, kHelloPrefixBytes> bytes) {
  HelloPrefix hello;
  hello.proof = auth::Proof::decode(bytes.first<auth::Proof::kWireBytes>());
  const std::uint8_t* rest = bytes.data() + auth::Proof::kWireBytes;
  if (load_le<std::uint32_t>(rest) != kHelloMagic) {
    fail(HM_ERR_TRANSPORT, "not a Holmes verbs hello (magic {:08x})", load_le<std::uint32_t>(rest));
  }
  hello.rank = load_le<std::uint32_t>(rest + 4);
  hello.info_bytes = load_le<std::uint32_t>(rest + 8);
  if (hello.info_bytes == 0 || hello.info_bytes > kMaxQpInfoBytes) {
    fail(HM_ERR_TRANSPORT, "a hello announces a {}-byte queue pair description (at most {})",
         hello.info_bytes, kMaxQpInfoBytes);
  }
  return hello;
}

std::vector<std::uint8_t> encode_reply(const auth::Verdict& verdict, hm_status_t status,
                                       std::span<const std::uint8_t> payload) {
  ByteWriter out;
  out.put_bytes(verdict.encode());
  out.put<std::uint32_t>(static_cast<std::uint32_t>(status));
  out.put<std::uint32_t>(static_cast<std::uint32_t>(payload.size()));
  out.put_bytes(payload);
  return std::move(out.bytes());
}

ReplyPrefix decode_reply_prefix(std::span<const std::uint8_t, kReplyPrefixBytes> bytes) {
  const auto status = load_le<std::uint32_t>(bytes.data());
  const auto length = load_le<std::uint32_t>(bytes.data() + 4);
  if (status > static_cast<std::uint32_t>(HM_ERR_INTERNAL)) {
    fail(HM_ERR_TRANSPORT, "a handshake reply with unknown status {}", status);
  }
  const std::size_t limit = status == HM_SUCCESS ? kMaxQpInfoBytes : kMaxReplyTextBytes;
  if (length > limit || (status == HM_SUCCESS && length == 0)) {
    fail(HM_ERR_TRANSPORT, "a handshake reply announces {} bytes (at most {})", length, limit);
  }
  return {static_cast<hm_status_t>(status), length};
}

std::string handshake_context(const std::string& communicator, int client_rank, int server_rank) {
  return fmt::format("verbs|{}|{}->{}", communicator, client_rank, server_rank);
}

}  // namespace holmes::verbs
