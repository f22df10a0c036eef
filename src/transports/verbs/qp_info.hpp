// What one end of an RC queue pair tells the other so that it can move its queue pair to
// ready-to-receive: where the port is (LID for InfiniBand, GID for RoCE), the queue pair number
// and first packet sequence number, the path MTU it can do, and how many receive slots of what
// size it posted (the other end's credits and largest message). Exchanged once per queue pair
// over the transport's authenticated TCP handshake (handshake.hpp).
//
// Wire format, little-endian:
//   u32 magic "HMQI" | u16 version | u8 link layer | u8 GID type | u8 active MTU | u8 reserved |
//   u16 LID | 16 B GID | u32 QPN | u32 PSN | u32 receive slots | u32 receive slot bytes |
//   u32 length + device name ("mlx5_0:1", printable, at most 64 bytes)
// decode() refuses anything a queue pair could not use, so hostile bytes never reach ibverbs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "transports/verbs/port_discovery.hpp"

namespace holmes::verbs {

constexpr std::uint32_t kQpInfoMagic = 0x4951'4d48;  // "HMQI"
constexpr std::uint16_t kQpInfoVersion = 1;
constexpr std::size_t kMaxDeviceNameBytes = 64;
constexpr std::size_t kMaxQpInfoBytes = 128;  // the encoding is never longer
constexpr std::uint32_t kMinSlotBytes = 64;   // a control slot: one header, rounded up
constexpr std::uint32_t kMaxSlotBytes = 16u << 20;

struct QpInfo {
  LinkLayer link_layer = LinkLayer::kUnknown;
  GidType gid_type = GidType::kUnknown;
  std::uint8_t mtu = 0;  // ibv_mtu code, 1..5
  std::uint16_t lid = 0;
  Gid gid{};
  std::uint32_t qpn = 0;  // 24 bits
  std::uint32_t psn = 0;  // 24 bits
  std::uint32_t recv_slots = 0;
  std::uint32_t recv_slot_bytes = 0;
  std::string device;  // "mlx5_0:1", for messages

  std::vector<std::uint8_t> encode() const;
  // Throws HM_ERR_TRANSPORT naming the first field that is malformed or out of range.
  static QpInfo decode(std::span<const std::uint8_t> bytes);

  bool operator==(const QpInfo&) const = default;
};

// Why two ends cannot form a queue pair (InfiniBand with RoCE, RoCE v1 with v2), or "".
std::string incompatibility(const QpInfo& local, const QpInfo& remote);

}  // namespace holmes::verbs
