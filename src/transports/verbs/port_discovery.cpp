#include "transports/verbs/port_discovery.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/status.hpp"
#include "core/text.hpp"

namespace holmes::verbs {
namespace fs = std::filesystem;

namespace {

// A whole small sysfs file; nullopt when it cannot be opened or read (sysfs answers EINVAL for
// attributes of empty GID entries) or is empty.
std::optional<std::string> read_small_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buffer[512];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0) {
      ::close(fd);
      return std::nullopt;
    }
    if (got == 0) break;
    text.append(buffer, static_cast<std::size_t>(got));
    if (text.size() > 4096) break;  // no attribute is this long: stop reading
  }
  ::close(fd);
  if (text.empty()) return std::nullopt;
  return text;
}

// A directory entry's name as a number in [min, max], or nullopt.
std::optional<int> numeric_name(const fs::path& path, int min, int max) {
  const std::string name = path.filename().string();
  int value = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), value);
  if (ec != std::errc() || end != name.data() + name.size() || value < min || value > max) {
    return std::nullopt;
  }
  return value;
}

std::optional<int> hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return std::nullopt;
}

std::string quoted(const std::optional<std::string>& text) {
  if (!text) return "unreadable";
  std::string shown(trim(*text).substr(0, 40));
  for (char& c : shown) {
    if (!std::isprint(static_cast<unsigned char>(c))) c = '?';
  }
  return fmt::format("'{}'", shown);
}

std::string describe(const PortInfo& p) {
  return fmt::format("{} ({}, {})", p.name(), link_layer_name(p.link_layer),
                     p.state_name.empty() ? "state unknown" : p.state_name);
}

// Lower is better: RoCE v2 before unknown before v1, then IPv4-mapped, global, link-local.
int roce_rank(const GidEntry& e) {
  const int type = e.type == GidType::kRoceV2 ? 0 : e.type == GidType::kUnknown ? 1 : 2;
  const int scope = gid_is_ipv4_mapped(e.gid) ? 0 : gid_is_link_local(e.gid) ? 2 : 1;
  return type * 3 + scope;
}

// Why an ACTIVE port cannot carry traffic, or "" when it can.
std::string unusable_reason(const PortInfo& p) {
  if (!p.problem.empty()) return p.problem;
  if (p.state != kPortActive) return "not ACTIVE";
  if (p.link_layer == LinkLayer::kUnknown) return "unknown link layer";
  if (p.link_layer == LinkLayer::kInfiniBand && p.lid == 0) {
    return "no LID (is a subnet manager running?)";
  }
  try {
    choose_gid(p, std::nullopt);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// "mlx5_0:1 (InfiniBand, DOWN): not ACTIVE; ..."
std::string list_ports(const std::vector<PortInfo>& ports) {
  std::vector<std::string> parts;
  for (const auto& p : ports) {
    const auto why = unusable_reason(p);
    parts.push_back(why.empty() ? describe(p) : fmt::format("{}: {}", describe(p), why));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace

const char* link_layer_name(LinkLayer layer) {
  switch (layer) {
    case LinkLayer::kInfiniBand:
      return "InfiniBand";
    case LinkLayer::kEthernet:
      return "Ethernet";
    case LinkLayer::kUnknown:
      break;
  }
  return "unknown";
}

const char* gid_type_name(GidType type) {
  switch (type) {
    case GidType::kIbOrRoceV1:
      return "IB/RoCE v1";
    case GidType::kRoceV2:
      return "RoCE v2";
    case GidType::kUnknown:
      break;
  }
  return "unknown type";
}

std::string PortInfo::name() const { return fmt::format("{}:{}", device, port); }

std::optional<int> parse_port_state(std::string_view text) {
  text = trim(text);
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data() + text.size() || *end != ':') return std::nullopt;
  if (value < 0 || value > 5) return std::nullopt;
  const std::string_view name = trim(text.substr(static_cast<std::size_t>(end - text.data()) + 1));
  if (name.empty()) return std::nullopt;
  return value;
}

std::optional<LinkLayer> parse_link_layer(std::string_view text) {
  text = trim(text);
  if (text == "InfiniBand") return LinkLayer::kInfiniBand;
  if (text == "Ethernet") return LinkLayer::kEthernet;
  return std::nullopt;
}

std::optional<double> parse_rate(std::string_view text) {
  text = trim(text);
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || value <= 0 || value > 1e6) return std::nullopt;
  const std::string_view rest = text.substr(static_cast<std::size_t>(end - text.data()));
  if (!rest.starts_with(" Gb/sec")) return std::nullopt;
  return value;
}

std::optional<std::uint16_t> parse_lid(std::string_view text) {
  text = trim(text);
  if (!text.starts_with("0x") || text.size() < 3 || text.size() > 6) return std::nullopt;
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data() + 2, text.data() + text.size(), value, 16);
  if (ec != std::errc() || end != text.data() + text.size() || value > 0xffff) return std::nullopt;
  return static_cast<std::uint16_t>(value);
}

std::optional<Gid> parse_gid(std::string_view text) {
  text = trim(text);
  if (text.size() != 39) return std::nullopt;  // 8 groups of 4 hex digits, 7 colons
  Gid gid{};
  for (std::size_t group = 0; group < 8; ++group) {
    const std::size_t at = group * 5;
    if (group < 7 && text[at + 4] != ':') return std::nullopt;
    unsigned value = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      const auto digit = hex_digit(text[at + i]);
      if (!digit) return std::nullopt;
      value = value * 16 + static_cast<unsigned>(*digit);
    }
    gid[group * 2] = static_cast<std::uint8_t>(value >> 8);
    gid[group * 2 + 1] = static_cast<std::uint8_t>(value & 0xff);
  }
  return gid;
}

std::optional<GidType> parse_gid_type(std::string_view text) {
  text = trim(text);
  if (text == "IB/RoCE v1") return GidType::kIbOrRoceV1;
  if (text == "RoCE v2") return GidType::kRoceV2;
  return std::nullopt;
}

std::string format_gid(const Gid& gid) {
  std::string out;
  for (std::size_t group = 0; group < 8; ++group) {
    if (group > 0) out += ':';
    out += fmt::format("{:02x}{:02x}", gid[group * 2], gid[group * 2 + 1]);
  }
  return out;
}

bool gid_is_zero(const Gid& gid) {
  return std::all_of(gid.begin(), gid.end(), [](std::uint8_t b) { return b == 0; });
}

bool gid_is_ipv4_mapped(const Gid& gid) {
  for (std::size_t i = 0; i < 10; ++i) {
    if (gid[i] != 0) return false;
  }
  return gid[10] == 0xff && gid[11] == 0xff;
}

bool gid_is_link_local(const Gid& gid) { return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80; }

std::uint64_t gid_subnet_prefix(const Gid& gid) {
  std::uint64_t prefix = 0;
  for (std::size_t i = 0; i < 8; ++i) prefix = (prefix << 8) | gid[i];
  return prefix;
}

std::optional<double> rate_from_codes(int speed_code, int width_code) {
  double lane = 0;
  switch (speed_code) {
    case 1:
      lane = 2.5;  // SDR
      break;
    case 2:
      lane = 5;  // DDR
      break;
    case 4:
      lane = 10;  // QDR
      break;
    case 8:
      lane = 10;  // FDR10
      break;
    case 16:
      lane = 14;  // FDR
      break;
    case 32:
      lane = 25;  // EDR
      break;
    case 64:
      lane = 50;  // HDR
      break;
    case 128:
      lane = 100;  // NDR
      break;
    case 256:
      lane = 200;  // XDR (active_speed_ex)
      break;
    default:
      return std::nullopt;
  }
  int lanes = 0;
  switch (width_code) {
    case 1:
      lanes = 1;
      break;
    case 2:
      lanes = 4;
      break;
    case 4:
      lanes = 8;
      break;
    case 8:
      lanes = 12;
      break;
    case 16:
      lanes = 2;
      break;
    default:
      return std::nullopt;
  }
  return lane * lanes;
}

int mtu_bytes(int mtu_code) { return mtu_code >= 1 && mtu_code <= 5 ? 128 << mtu_code : 0; }

const char* port_state_name(int state) {
  switch (state) {
    case 0:
      return "NOP";
    case 1:
      return "DOWN";
    case 2:
      return "INIT";
    case 3:
      return "ARMED";
    case 4:
      return "ACTIVE";
    case 5:
      return "ACTIVE_DEFER";
    default:
      return "UNKNOWN";
  }
}

std::vector<GidEntry> read_gid_table(const fs::path& port_dir) {
  std::vector<GidEntry> table;
  std::error_code ec;
  for (fs::directory_iterator it(port_dir / "gids", ec), end; !ec && it != end; it.increment(ec)) {
    const auto index = numeric_name(it->path(), 0, 65535);
    if (!index) continue;
    const auto text = read_small_file(it->path());
    if (!text) continue;
    const auto gid = parse_gid(*text);
    if (!gid || gid_is_zero(*gid)) continue;
    GidEntry entry;
    entry.index = *index;
    entry.gid = *gid;
    const auto name = std::to_string(*index);
    if (const auto type = read_small_file(port_dir / "gid_attrs" / "types" / name)) {
      entry.type = parse_gid_type(*type).value_or(GidType::kUnknown);
    }
    if (const auto netdev = read_small_file(port_dir / "gid_attrs" / "ndevs" / name)) {
      entry.netdev = std::string(trim(*netdev));
    }
    table.push_back(std::move(entry));
  }
  std::sort(table.begin(), table.end(),
            [](const GidEntry& a, const GidEntry& b) { return a.index < b.index; });
  return table;
}

std::vector<PortInfo> scan_sysfs(const fs::path& root) {
  std::vector<PortInfo> ports;
  std::error_code ec;
  std::vector<fs::path> devices;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code dir_ec;
    if (fs::is_directory(it->path(), dir_ec)) devices.push_back(it->path());
  }
  std::sort(devices.begin(), devices.end());
  for (const auto& device : devices) {
    std::vector<std::pair<int, fs::path>> port_dirs;
    std::error_code port_ec;
    for (fs::directory_iterator it(device / "ports", port_ec), end; !port_ec && it != end;
         it.increment(port_ec)) {
      if (const auto number = numeric_name(it->path(), 1, 255)) {
        port_dirs.emplace_back(*number, it->path());
      }
    }
    std::sort(port_dirs.begin(), port_dirs.end());
    for (const auto& [number, dir] : port_dirs) {
      PortInfo p;
      p.device = device.filename().string();
      p.port = number;
      std::vector<std::string> problems;
      const auto state_text = read_small_file(dir / "state");
      if (const auto state = state_text ? parse_port_state(*state_text) : std::nullopt) {
        p.state = *state;
        p.state_name = port_state_name(*state);
      } else {
        problems.push_back(fmt::format("its state file is {}", quoted(state_text)));
      }
      const auto layer_text = read_small_file(dir / "link_layer");
      if (const auto layer = layer_text ? parse_link_layer(*layer_text) : std::nullopt) {
        p.link_layer = *layer;
      } else {
        problems.push_back(fmt::format("its link_layer file is {}", quoted(layer_text)));
      }
      if (const auto rate_text = read_small_file(dir / "rate")) {
        p.rate_gbps = parse_rate(*rate_text).value_or(0);  // informational only
      }
      const auto lid_text = read_small_file(dir / "lid");
      if (const auto lid = lid_text ? parse_lid(*lid_text) : std::nullopt) {
        p.lid = *lid;
      } else if (p.link_layer == LinkLayer::kInfiniBand) {
        problems.push_back(fmt::format("its lid file is {}", quoted(lid_text)));
      }
      p.gids = read_gid_table(dir);
      if (!problems.empty()) p.problem = fmt::format("{}", fmt::join(problems, ", "));
      ports.push_back(std::move(p));
    }
  }
  return ports;
}

std::vector<DeviceSpec> parse_device_spec(std::string_view text) {
  std::vector<DeviceSpec> specs;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view entry = trim(text.substr(start, comma - start));
    const auto bad = [&](const char* why) {
      fail(HM_ERR_INVALID_ARGUMENT,
           "HOLMES_IB_DEVICE='{}': entry '{}' {} (expected device[:port], e.g. mlx5_0:1, "
           "comma-separated)",
           text, entry, why);
    };
    if (entry.empty()) bad("is empty");
    DeviceSpec spec;
    const std::size_t colon = entry.find(':');
    spec.device = std::string(entry.substr(0, colon));
    if (spec.device.empty()) bad("has no device name");
    for (char c : spec.device) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
        bad("has a character a device name cannot have");
      }
    }
    if (colon != std::string_view::npos) {
      const std::string_view number = entry.substr(colon + 1);
      const auto [end, ec] =
          std::from_chars(number.data(), number.data() + number.size(), spec.port);
      if (ec != std::errc() || end != number.data() + number.size() || spec.port < 1 ||
          spec.port > 255) {
        bad("has a port that is not a number in [1, 255]");
      }
    }
    specs.push_back(std::move(spec));
    start = comma + 1;
  }
  return specs;
}

GidEntry choose_gid(const PortInfo& port, std::optional<int> override) {
  if (override) {
    for (const auto& e : port.gids) {
      if (e.index == *override) return e;
    }
    std::vector<int> valid;
    for (const auto& e : port.gids) valid.push_back(e.index);
    fail(HM_ERR_INVALID_ARGUMENT,
         "HOLMES_IB_GID_INDEX={}: {} has no non-zero GID at that index (non-zero entries: {})",
         *override, port.name(),
         valid.empty() ? "none" : fmt::format("{}", fmt::join(valid, ", ")));
  }
  if (port.gids.empty()) {
    fail(HM_ERR_UNSUPPORTED, "{} has no non-zero GID{}", port.name(),
         port.link_layer == LinkLayer::kEthernet
             ? " (RoCE needs an IP address on the port's network interface)"
             : "");
  }
  if (port.link_layer == LinkLayer::kInfiniBand) {
    return port.gids.front();  // the table is sorted: GID 0 (the port GID) when present
  }
  const auto best = std::min_element(port.gids.begin(), port.gids.end(),
                                     [](const GidEntry& a, const GidEntry& b) {
                                       const int ra = roce_rank(a);
                                       const int rb = roce_rank(b);
                                       return ra != rb ? ra < rb : a.index < b.index;
                                     });
  return *best;
}

PortChoice choose_port(const std::vector<PortInfo>& ports,
                       const std::optional<std::string>& device_spec, std::optional<int> gid_index,
                       int local_rank) {
  if (ports.empty()) fail(HM_ERR_UNSUPPORTED, "no RDMA device found");
  std::vector<const PortInfo*> candidates;
  if (device_spec) {
    for (const auto& spec : parse_device_spec(*device_spec)) {
      std::vector<const PortInfo*> of_device;
      for (const auto& p : ports) {
        if (p.device == spec.device) of_device.push_back(&p);
      }
      if (of_device.empty()) {
        std::vector<std::string> names;
        for (const auto& p : ports) {
          if (names.empty() || names.back() != p.device) names.push_back(p.device);
        }
        fail(HM_ERR_INVALID_ARGUMENT,
             "HOLMES_IB_DEVICE names {}, which is not an RDMA device of this host (found: {})",
             spec.device, fmt::join(names, ", "));
      }
      const PortInfo* chosen = nullptr;
      if (spec.port != 0) {
        for (const auto* p : of_device) {
          if (p->port == spec.port) chosen = p;
        }
        if (chosen == nullptr) {
          std::vector<int> numbers;
          for (const auto* p : of_device) numbers.push_back(p->port);
          fail(HM_ERR_INVALID_ARGUMENT, "HOLMES_IB_DEVICE names {}:{}, but {} has ports {}",
               spec.device, spec.port, spec.device, fmt::join(numbers, ", "));
        }
        if (const auto why = unusable_reason(*chosen); !why.empty()) {
          fail(HM_ERR_UNSUPPORTED, "HOLMES_IB_DEVICE names {}, which cannot be used: {}",
               describe(*chosen), why);
        }
      } else {
        for (const auto* p : of_device) {
          if (unusable_reason(*p).empty()) {
            chosen = p;
            break;
          }
        }
        if (chosen == nullptr) {
          std::vector<PortInfo> listed;
          for (const auto* p : of_device) listed.push_back(*p);
          fail(HM_ERR_UNSUPPORTED, "HOLMES_IB_DEVICE names {}, which has no usable ACTIVE port: {}",
               spec.device, list_ports(listed));
        }
      }
      candidates.push_back(chosen);
    }
  } else {
    bool any_infiniband = false;
    for (const auto& p : ports) {
      if (unusable_reason(p).empty()) {
        candidates.push_back(&p);
        any_infiniband = any_infiniband || p.link_layer == LinkLayer::kInfiniBand;
      }
    }
    if (any_infiniband) {
      std::erase_if(candidates,
                    [](const PortInfo* p) { return p->link_layer != LinkLayer::kInfiniBand; });
    }
    if (candidates.empty()) {
      fail(HM_ERR_UNSUPPORTED, "no usable ACTIVE RDMA port ({})", list_ports(ports));
    }
  }
  const auto which = static_cast<std::size_t>(std::max(local_rank, 0)) % candidates.size();
  const PortInfo& port = *candidates[which];
  return PortChoice{port, choose_gid(port, gid_index)};
}

}  // namespace holmes::verbs
