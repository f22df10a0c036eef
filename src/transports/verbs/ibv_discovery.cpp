#include "transports/verbs/ibv_discovery.hpp"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>

#include <fmt/format.h>

#include "core/status.hpp"

namespace holmes::verbs {
namespace {

struct DeviceListDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};
struct ContextCloser {
  void operator()(ibv_context* context) const { ibv_close_device(context); }
};

// Whether the kernel exposes any RDMA device at all (for the message when none is usable).
std::string sysfs_summary() {
  std::error_code ec;
  const std::filesystem::path root("/sys/class/infiniband");
  if (!std::filesystem::exists(root, ec)) return "no /sys/class/infiniband entries";
  if (std::filesystem::is_empty(root, ec)) return "/sys/class/infiniband is empty";
  return "/sys/class/infiniband has entries, but no userspace provider claimed them (is "
         "ibverbs-providers / rdma-core installed?)";
}

LinkLayer link_layer_of(std::uint8_t code) {
  // Old drivers report "unspecified": they predate RoCE, so the port is InfiniBand.
  return code == IBV_LINK_LAYER_ETHERNET ? LinkLayer::kEthernet : LinkLayer::kInfiniBand;
}

// The GID table through ibverbs, for kernels whose sysfs lacks it (types unknown).
std::vector<GidEntry> query_gid_table(ibv_context* context, int port, int table_length) {
  std::vector<GidEntry> table;
  for (int index = 0; index < table_length && index < 256; ++index) {
    ibv_gid gid{};
    if (ibv_query_gid(context, static_cast<std::uint8_t>(port), index, &gid) != 0) continue;
    GidEntry entry;
    entry.index = index;
    std::memcpy(entry.gid.data(), gid.raw, entry.gid.size());
    if (!gid_is_zero(entry.gid)) table.push_back(entry);
  }
  return table;
}

}  // namespace

std::vector<PortInfo> query_ports() {
  int count = 0;
  errno = 0;
  std::unique_ptr<ibv_device*, DeviceListDeleter> list(ibv_get_device_list(&count));
  const int list_errno = errno;
  if (!list || count <= 0) {
    fail(HM_ERR_UNSUPPORTED, "no RDMA device found ({}; ibv_get_device_list returned {})",
         sysfs_summary(),
         !list && list_errno != 0 ? fmt::format("none: {}", std::strerror(list_errno))
                                  : std::string("none"));
  }
  std::vector<PortInfo> ports;
  for (int i = 0; i < count; ++i) {
    ibv_device* device = list.get()[i];
    const std::string name = ibv_get_device_name(device);
    PortInfo unusable;
    unusable.device = name;
    std::unique_ptr<ibv_context, ContextCloser> context(ibv_open_device(device));
    if (!context) {
      unusable.problem = fmt::format("cannot be opened: {}", std::strerror(errno));
      ports.push_back(unusable);
      continue;
    }
    ibv_device_attr device_attr{};
    if (const int rc = ibv_query_device(context.get(), &device_attr); rc != 0) {
      unusable.problem = fmt::format("ibv_query_device failed: {}", std::strerror(rc));
      ports.push_back(unusable);
      continue;
    }
    for (int port = 1; port <= device_attr.phys_port_cnt; ++port) {
      PortInfo p;
      p.device = name;
      p.port = port;
      ibv_port_attr attr{};
      if (const int rc = ibv_query_port(context.get(), static_cast<std::uint8_t>(port), &attr);
          rc != 0) {
        p.problem = fmt::format("ibv_query_port failed: {}", std::strerror(rc));
        ports.push_back(p);
        continue;
      }
      p.state = attr.state;
      p.state_name = port_state_name(attr.state);
      p.link_layer = link_layer_of(attr.link_layer);
      p.active_mtu = attr.active_mtu;
      p.lid = attr.lid;
      p.rate_gbps = rate_from_codes(attr.active_speed, attr.active_width).value_or(0);
      p.gids = read_gid_table(std::filesystem::path(device->ibdev_path) / "ports" /
                              std::to_string(port));
      if (p.gids.empty()) p.gids = query_gid_table(context.get(), port, attr.gid_tbl_len);
      ports.push_back(std::move(p));
    }
  }
  return ports;
}

}  // namespace holmes::verbs
