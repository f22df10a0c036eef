// Finding the RDMA port a rank uses and the GID it is reached at, as pure functions over plain
// structs and over a sysfs tree, so that every rule is tested on machines without RDMA hardware
// (tests build fake /sys/class/infiniband trees).
//
// The kernel describes each port under /sys/class/infiniband/<device>/ports/<n>/:
//   state "4: ACTIVE", link_layer "InfiniBand" | "Ethernet", rate "100 Gb/sec (4X EDR)",
//   lid "0x1a", gids/<i> "fe80:0000:...", gid_attrs/types/<i> "IB/RoCE v1" | "RoCE v2",
//   gid_attrs/ndevs/<i> "eth0" (reading the type of an empty GID entry fails with EINVAL).
// The active MTU is not in sysfs; on hardware the ports come from ibv_query_port instead
// (ibv_discovery.hpp) and only the GID table is read from sysfs.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace holmes::verbs {

enum class LinkLayer : std::uint8_t { kUnknown = 0, kInfiniBand = 1, kEthernet = 2 };
const char* link_layer_name(LinkLayer layer);  // "InfiniBand", "Ethernet" (RoCE), "unknown"

// On InfiniBand ports every GID reads "IB/RoCE v1"; on Ethernet ports each address appears once
// as RoCE v1 and once as RoCE v2.
enum class GidType : std::uint8_t { kUnknown = 0, kIbOrRoceV1 = 1, kRoceV2 = 2 };
const char* gid_type_name(GidType type);

using Gid = std::array<std::uint8_t, 16>;

struct GidEntry {
  int index = 0;
  Gid gid{};
  GidType type = GidType::kUnknown;
  std::string netdev;  // the Ethernet interface of a RoCE GID, "" when unknown
};

// ibv_port_state values.
constexpr int kPortDown = 1;
constexpr int kPortActive = 4;

struct PortInfo {
  std::string device;  // "mlx5_0"
  int port = 0;        // 1-based; 0 for a device that could not be opened
  LinkLayer link_layer = LinkLayer::kUnknown;
  int state = 0;           // ibv_port_state: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE
  std::string state_name;  // "ACTIVE"
  int active_mtu = 0;      // ibv_mtu code 1..5 (256..4096 bytes); 0 when unknown
  double rate_gbps = 0;    // nominal signalling rate, 0 when unknown
  std::uint16_t lid = 0;
  std::vector<GidEntry> gids;  // non-zero entries only, by index
  std::string problem;         // why the port is unusable although it may be ACTIVE; "" if fine
  std::string name() const;    // "mlx5_0:1"
};

// ---- parsing one sysfs value (trailing whitespace allowed; nullopt when malformed) ----------
std::optional<int> parse_port_state(std::string_view text);        // "4: ACTIVE" -> 4
std::optional<LinkLayer> parse_link_layer(std::string_view text);  // "InfiniBand", "Ethernet"
std::optional<double> parse_rate(std::string_view text);           // "100 Gb/sec (4X EDR)" -> 100
std::optional<std::uint16_t> parse_lid(std::string_view text);     // "0x1a" -> 26
std::optional<Gid> parse_gid(std::string_view text);           // eight groups of four hex digits
std::optional<GidType> parse_gid_type(std::string_view text);  // "IB/RoCE v1", "RoCE v2"

std::string format_gid(const Gid& gid);  // "fe80:0000:...:0001", as sysfs writes it
bool gid_is_zero(const Gid& gid);
bool gid_is_ipv4_mapped(const Gid& gid);  // ::ffff:a.b.c.d
bool gid_is_link_local(const Gid& gid);   // fe80::/10
// The first 8 bytes: the IB subnet prefix (fe80:: when the subnet manager set none).
std::uint64_t gid_subnet_prefix(const Gid& gid);

// ---- port attributes --------------------------------------------------------------------------
// ibv_port_attr's active_speed and active_width codes to the nominal rate in Gbit/s, as ibstat
// and sysfs report it (e.g. EDR 4x = 100); nullopt for codes this table does not know.
std::optional<double> rate_from_codes(int speed_code, int width_code);
// ibv_mtu code (1..5) to bytes, 0 when out of range.
int mtu_bytes(int mtu_code);
const char* port_state_name(int state);  // "ACTIVE", "DOWN", ...

// ---- reading sysfs ----------------------------------------------------------------------------
// The non-zero GIDs under `port_dir` (.../ports/<n>), by index; unreadable entries are skipped.
std::vector<GidEntry> read_gid_table(const std::filesystem::path& port_dir);
// Every port of every device under `root` (normally /sys/class/infiniband), sorted by device
// name and port number. Malformed attribute files make that port's `problem` say which file.
std::vector<PortInfo> scan_sysfs(const std::filesystem::path& root);

// ---- choosing ----------------------------------------------------------------------------------
// One entry of HOLMES_IB_DEVICE: "mlx5_0" (its first ACTIVE port) or "mlx5_0:1".
struct DeviceSpec {
  std::string device;
  int port = 0;  // 0: any
};
// A comma-separated list of entries; throws HM_ERR_INVALID_ARGUMENT naming the bad entry.
std::vector<DeviceSpec> parse_device_spec(std::string_view text);

// The GID a port is reached at: `override` (HOLMES_IB_GID_INDEX) when given; on InfiniBand GID 0
// (the port GID); on RoCE the best of: RoCE v2 before v1, IPv4-mapped before global IPv6 before
// link-local, lowest index first. Throws HM_ERR_INVALID_ARGUMENT when the override names no
// non-zero entry, HM_ERR_UNSUPPORTED when the port has no usable GID.
GidEntry choose_gid(const PortInfo& port, std::optional<int> override);

struct PortChoice {
  PortInfo port;
  GidEntry gid;
};

// The port this rank uses. With `device_spec` (HOLMES_IB_DEVICE) one of the listed ports, which
// must exist and be ACTIVE; otherwise the ACTIVE ports that have a usable GID, InfiniBand ones
// only when there are any (a host's RoCE port is then usually not the compute fabric). Among
// several candidates, local rank k takes candidate k mod n so that the ranks of a host spread
// over its NICs. Throws HM_ERR_UNSUPPORTED ("no RDMA device found", "no ACTIVE port: ...") or
// HM_ERR_INVALID_ARGUMENT (an override that names nothing).
PortChoice choose_port(const std::vector<PortInfo>& ports,
                       const std::optional<std::string>& device_spec, std::optional<int> gid_index,
                       int local_rank);

}  // namespace holmes::verbs
