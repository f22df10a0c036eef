#include "transports/verbs/qp_info.hpp"

#include <cctype>

#include "core/bytes.hpp"
#include "core/status.hpp"
#include "transports/verbs/credit_window.hpp"
#include "transports/verbs/wire.hpp"

namespace holmes::verbs {

std::vector<std::uint8_t> QpInfo::encode() const {
  ByteWriter out;
  out.put<std::uint32_t>(kQpInfoMagic);
  out.put<std::uint16_t>(kQpInfoVersion);
  out.put<std::uint8_t>(static_cast<std::uint8_t>(link_layer));
  out.put<std::uint8_t>(static_cast<std::uint8_t>(gid_type));
  out.put<std::uint8_t>(mtu);
  out.put<std::uint8_t>(0);
  out.put<std::uint16_t>(lid);
  out.put_bytes(gid);
  out.put<std::uint32_t>(qpn);
  out.put<std::uint32_t>(psn);
  out.put<std::uint32_t>(recv_slots);
  out.put<std::uint32_t>(recv_slot_bytes);
  out.put_string(device);
  return std::move(out.bytes());
}

QpInfo QpInfo::decode(std::span<const std::uint8_t> bytes) {
  const auto bad = [](const std::string& what) {
    fail(HM_ERR_TRANSPORT, "malformed queue pair description: {}", what);
  };
  if (bytes.size() > kMaxQpInfoBytes) bad(fmt::format("{} bytes is too long", bytes.size()));
  ByteReader in(bytes);
  const auto magic = in.get<std::uint32_t>();
  const auto version = in.get<std::uint16_t>();
  if (!in.ok() || magic != kQpInfoMagic) bad("not a Holmes verbs queue pair description");
  if (version != kQpInfoVersion) {
    bad(fmt::format("version {} (this build speaks {})", version, kQpInfoVersion));
  }
  QpInfo info;
  const auto layer = in.get<std::uint8_t>();
  const auto type = in.get<std::uint8_t>();
  info.mtu = in.get<std::uint8_t>();
  const auto reserved = in.get<std::uint8_t>();
  info.lid = in.get<std::uint16_t>();
  for (auto& b : info.gid) b = in.get<std::uint8_t>();
  info.qpn = in.get<std::uint32_t>();
  info.psn = in.get<std::uint32_t>();
  info.recv_slots = in.get<std::uint32_t>();
  info.recv_slot_bytes = in.get<std::uint32_t>();
  info.device = in.get_string(kMaxDeviceNameBytes);
  if (!in.ok()) bad("truncated, or a device name longer than 64 bytes");
  if (!in.at_end()) bad("trailing bytes");
  if (reserved != 0) bad("reserved byte set");
  if (layer != static_cast<std::uint8_t>(LinkLayer::kInfiniBand) &&
      layer != static_cast<std::uint8_t>(LinkLayer::kEthernet)) {
    bad(fmt::format("link layer {}", layer));
  }
  info.link_layer = static_cast<LinkLayer>(layer);
  if (type > static_cast<std::uint8_t>(GidType::kRoceV2)) bad(fmt::format("GID type {}", type));
  info.gid_type = static_cast<GidType>(type);
  if (info.mtu < 1 || info.mtu > 5) bad(fmt::format("MTU code {} (valid: 1..5)", info.mtu));
  if (info.qpn < 2 || info.qpn > 0xffffff) bad(fmt::format("queue pair number {}", info.qpn));
  if (info.psn > 0xffffff) bad(fmt::format("packet sequence number {}", info.psn));
  if (info.recv_slots < CreditWindow::kMinSlots || info.recv_slots > kMaxSlots) {
    bad(fmt::format("{} receive slots (valid: {}..{})", info.recv_slots, CreditWindow::kMinSlots,
                    kMaxSlots));
  }
  if (info.recv_slot_bytes < kMinSlotBytes || info.recv_slot_bytes > kMaxSlotBytes) {
    bad(fmt::format("{}-byte receive slots (valid: {}..{})", info.recv_slot_bytes, kMinSlotBytes,
                    kMaxSlotBytes));
  }
  if (info.link_layer == LinkLayer::kInfiniBand && (info.lid == 0 || info.lid >= 0xc000)) {
    bad(fmt::format("LID {:#x} is not a unicast LID", info.lid));
  }
  if (info.link_layer == LinkLayer::kEthernet && gid_is_zero(info.gid)) bad("zero GID on RoCE");
  if (info.device.empty()) bad("empty device name");
  for (char c : info.device) {
    if (!std::isprint(static_cast<unsigned char>(c))) bad("unprintable device name");
  }
  return info;
}

std::string incompatibility(const QpInfo& local, const QpInfo& remote) {
  if (local.link_layer != remote.link_layer) {
    return fmt::format("{} is {} but {} is {}", local.device, link_layer_name(local.link_layer),
                       remote.device, link_layer_name(remote.link_layer));
  }
  if (local.link_layer == LinkLayer::kEthernet && local.gid_type != GidType::kUnknown &&
      remote.gid_type != GidType::kUnknown && local.gid_type != remote.gid_type) {
    return fmt::format(
        "{} uses GID type {} but {} uses {} (set HOLMES_IB_GID_INDEX to GIDs of the same type)",
        local.device, gid_type_name(local.gid_type), remote.device, gid_type_name(remote.gid_type));
  }
  return "";
}

}  // namespace holmes::verbs
