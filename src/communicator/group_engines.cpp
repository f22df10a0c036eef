#include "communicator/group_engines.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "collectives/context.hpp"
#include "collectives/engine/ipc_engine.hpp"
#include "collectives/engine/nccl_engine.hpp"
#include "collectives/engine/two_level_engine.hpp"
#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::detail {
namespace {

// NCCL's network for a group: its own choice inside a host, IB verbs on an RDMA island (IB and
// RoCE alike), sockets on an Ethernet one.
std::string nccl_net_for(GroupLevel level, const std::string& fabric) {
  if (level == GroupLevel::kHost) return "";
  return fabric == "ib" || fabric == "roce" ? "IB" : "Socket";
}

const char* level_name(GroupLevel level) { return level == GroupLevel::kHost ? "host" : "island"; }

// The group's own part of the store's keys for one engine: "nccl/island/0/2/4".
std::string group_key_name(const char* engine, GroupLevel level, const std::vector<int>& members) {
  std::string key = fmt::format("{}/{}", engine, level_name(level));
  for (int m : members) key += fmt::format("/{}", m);
  return key;
}

}  // namespace

const char* engine_kind_name(EngineKind kind) {
  switch (kind) {
    case EngineKind::kRing:
      return "ring";
    case EngineKind::kBlockwise:
      return "blockwise";
    case EngineKind::kIpc:
      return "ipc";
    case EngineKind::kNccl:
      return "nccl";
    case EngineKind::kTwoLevel:
      return "two-level";
  }
  return "?";
}

EngineChoice choose_group_engine(const EngineFacts& f) {
  const std::string where =
      f.level == GroupLevel::kHost
          ? std::string("inside a host")
          : fmt::format("inside an island ({})", f.fabric.empty() ? "fabric unknown" : f.fabric);
  if (f.setting == "ring") return {EngineKind::kRing, "HOLMES_GROUP_ENGINE=ring"};
  if (f.setting == "blockwise") return {EngineKind::kBlockwise, "HOLMES_GROUP_ENGINE=blockwise"};
  if (!f.device_buffers) {
    if (f.level == GroupLevel::kIsland && f.ranks_per_host >= 2) {
      return {EngineKind::kTwoLevel,
              fmt::format("host buffers {}, {} ranks on each host: every block across hosts once, "
                          "between the ranks at its place, then inside each host",
                          where, f.ranks_per_host)};
    }
    return {EngineKind::kRing, fmt::format("host buffers {}: Holmes's ring", where)};
  }
  if (f.setting == "ipc") {
    if (f.level != GroupLevel::kHost) {
      return {EngineKind::kRing,
              fmt::format("HOLMES_GROUP_ENGINE=ipc runs inside a host; {}, Holmes's ring, staged "
                          "through pinned memory",
                          where)};
    }
    if (!f.ipc_usable) {
      fail(HM_ERR_UNSUPPORTED,
           "HOLMES_GROUP_ENGINE=ipc, but the ranks of a host cannot map each other's device "
           "memory: {}",
           f.ipc_why_not);
    }
    return {EngineKind::kIpc, "HOLMES_GROUP_ENGINE=ipc, device buffers inside a host"};
  }
  if (f.setting == "nccl") {
    if (!f.nccl_usable) {
      fail(HM_ERR_UNSUPPORTED, "HOLMES_GROUP_ENGINE=nccl, but NCCL cannot run here: {}",
           f.nccl_why_not);
    }
    return {EngineKind::kNccl, fmt::format("HOLMES_GROUP_ENGINE=nccl, device buffers {}", where)};
  }
  if (f.level == GroupLevel::kHost && f.ipc_usable) {
    return {EngineKind::kIpc,
            "device buffers inside a host: CUDA IPC, the ranks reading each other's device "
            "memory directly, no host copy"};
  }
  if (f.nccl_usable) {
    return {EngineKind::kNccl,
            fmt::format("device buffers {}: NCCL, the fastest engine on one fabric", where)};
  }
  const std::string no_ipc =
      f.level == GroupLevel::kHost ? fmt::format("no IPC: {}; ", f.ipc_why_not) : "";
  return {EngineKind::kRing,
          fmt::format("device buffers {}: Holmes's ring, staged through pinned memory ({}no "
                      "NCCL: {})",
                      where, no_ipc, f.nccl_why_not)};
}

bool host_buffers_take_two_level(const std::string& setting) {
  // The choice itself, for host buffers in an island group of the engine's shape (host buffers
  // never reach the branches that can fail).
  EngineFacts f;
  f.setting = setting;
  f.level = GroupLevel::kIsland;
  f.ranks_per_host = 2;
  return choose_group_engine(f).kind == EngineKind::kTwoLevel;
}

CommunicatorEngines::CommunicatorEngines(EngineOptions options, std::vector<Locality> localities,
                                         EngineStore store)
    : options_(std::move(options)), localities_(std::move(localities)), store_(std::move(store)) {}

CommunicatorEngines::~CommunicatorEngines() = default;

GroupLevel CommunicatorEngines::level_of(const std::vector<int>& members, GroupLevel level) const {
  auto host = [&](int m) -> const std::string& {
    return localities_[static_cast<std::size_t>(m)].host;
  };
  const bool one_host = std::all_of(members.begin(), members.end(), [&](int m) {
    return m >= 0 && static_cast<std::size_t>(m) < localities_.size() &&
           host(m) == host(members.front());
  });
  return one_host ? GroupLevel::kHost : level;
}

int CommunicatorEngines::ranks_per_host(const std::vector<int>& members) const {
  // Hosts by their names' first appearance among the members.
  std::vector<std::string> names;
  std::vector<int> host_of;
  for (int m : members) {
    if (m < 0 || static_cast<std::size_t>(m) >= localities_.size()) return 0;
    const std::string& name = localities_[static_cast<std::size_t>(m)].host;
    const auto it = std::find(names.begin(), names.end(), name);
    host_of.push_back(static_cast<int>(it - names.begin()));
    if (it == names.end()) names.push_back(name);
  }
  return two_level_ranks_per_host(host_of);
}

EngineFacts CommunicatorEngines::facts(bool device_buffers, GroupLevel level,
                                       int some_member) const {
  EngineFacts f;
  f.setting = options_.setting;
  f.device_buffers = device_buffers;
  f.level = level;
  if (some_member >= 0 && static_cast<std::size_t>(some_member) < localities_.size()) {
    f.fabric = localities_[static_cast<std::size_t>(some_member)].fabric;
  }
  // What this process can do; for_group replaces it with the group's agreement.
  DeviceMemory* device = options_.process_device ? options_.process_device() : nullptr;
  f.ipc_usable = device != nullptr && device->can_share();
  f.ipc_why_not =
      device == nullptr ? "no device in this process" : "this device's memory cannot be shared";
  // Decided once per process, on first need (libnccl is loaded then, not at every creation).
  f.nccl_usable = nccl_usable(&f.nccl_why_not);
  return f;
}

std::string why_not_for_group(const EngineStore& store, const std::string& key,
                              const std::vector<int>& members, int position, bool usable,
                              const std::string& why_not, const std::string& refusal) {
  const std::string prefix = key + "/usable/";
  store.set(prefix + std::to_string(position), usable ? "yes" : "no: " + why_not);
  for (std::size_t p = 0; p < members.size(); ++p) {
    const std::string said = store.get(prefix + std::to_string(p));
    if (said != "yes") {
      return fmt::format("{} for rank {} of the group: {}", refusal, members[p],
                         said.rfind("no: ", 0) == 0 ? said.substr(4) : "it said '" + said + "'");
    }
  }
  return "";
}

CommunicatorEngines::IpcGroup CommunicatorEngines::set_up_ipc(
    const CollectiveContext& group, const std::vector<int>& members) const {
  const std::string key = group_key_name("ipc", GroupLevel::kHost, members);
  const std::size_t bytes = options_.ipc_window_bytes;
  const int position = group.rank();
  DeviceMemory& device = group.device_memory();
  // 1. Every member makes its window and publishes its handle, or why it cannot.
  DeviceMemory::SharedMemory own;
  std::string mine;
  try {
    own = device.allocate_shared(bytes);
    mine = "ok " + own.handle;
  } catch (const Error& e) {
    mine = fmt::format("no: {}", e.what());
  }
  store_.set(fmt::format("{}/window/{}", key, position), mine);
  IpcGroup result;
  IpcWindows windows;
  windows.bytes = bytes;
  std::vector<std::string> handles;
  for (std::size_t p = 0; p < members.size(); ++p) {
    const std::string said = store_.get(fmt::format("{}/window/{}", key, p));
    if (said.rfind("ok ", 0) != 0) {
      result.why_not = fmt::format("rank {} cannot share device memory: {}", members[p],
                                   said.rfind("no: ", 0) == 0 ? said.substr(4) : said);
      return result;  // every member reads the same answers and stops here too
    }
    handles.push_back(said.substr(3));
  }
  // 2. Every member maps the others' windows, and the group agrees that all of them could.
  std::string why_not_mapped;
  for (std::size_t p = 0; p < members.size() && why_not_mapped.empty(); ++p) {
    if (static_cast<int>(p) == position) {
      windows.at.push_back(own.memory);
      continue;
    }
    try {
      windows.at.push_back(device.open_shared(handles[p], bytes));
    } catch (const Error& e) {
      why_not_mapped = fmt::format("mapping rank {}'s window: {}", members[p], e.what());
    }
  }
  result.why_not = why_not_for_group(store_, key, members, position, why_not_mapped.empty(),
                                     why_not_mapped, "device memory cannot be mapped");
  if (result.why_not.empty()) result.engine = make_ipc_engine(std::move(windows));
  return result;
}

GroupEngine& CommunicatorEngines::for_group(const CollectiveContext& group, GroupLevel level) {
  GroupKey key{0, {}};
  for (int p = 0; p < group.size(); ++p) key.second.push_back(group.member(p));
  level = level_of(key.second, level);
  key.first = static_cast<int>(level);
  EngineFacts f = facts(group.on_device(), level, group.member(0));
  // Only host buffers' choice reads it.
  if (level == GroupLevel::kIsland && !f.device_buffers) {
    f.ranks_per_host = ranks_per_host(key.second);
  }
  std::lock_guard lock(mutex_);
  // (A group of one has nothing to share: the ring copies its block in place.)
  const bool ipc_candidate = f.device_buffers && level == GroupLevel::kHost &&
                             key.second.size() > 1 && (f.setting == "auto" || f.setting == "ipc");
  if (ipc_candidate) {
    // The windows, once per group; every member decides the same.
    auto [slot, fresh] = ipc_.try_emplace(key);
    if (fresh) {
      slot->second = set_up_ipc(group, key.second);
      HM_LOG_INFO("host group {}: {}", fmt::join(key.second, ","),
                  slot->second.engine ? "the ranks map each other's device memory (ipc)"
                                      : slot->second.why_not);
    }
    f.ipc_usable = slot->second.engine != nullptr;
    f.ipc_why_not = slot->second.why_not;
  }
  if (f.setting == "auto" && f.device_buffers && !(ipc_candidate && f.ipc_usable)) {
    // NCCL for the group only where it runs for every member; asked once per group.
    auto [agreed, fresh] = group_why_not_nccl_.try_emplace(key);
    if (fresh) {
      agreed->second =
          why_not_for_group(store_, group_key_name("nccl", level, key.second), key.second,
                            group.rank(), f.nccl_usable, f.nccl_why_not, "NCCL does not run");
      HM_LOG_INFO("{} group {}: {}", level_name(level), fmt::join(key.second, ","),
                  agreed->second.empty() ? "NCCL runs for every member" : agreed->second);
    }
    if (!agreed->second.empty()) {
      f.nccl_usable = false;
      f.nccl_why_not = agreed->second;
    }
  }
  const EngineChoice choice = choose_group_engine(f);
  switch (choice.kind) {
    case EngineKind::kRing:
      return ring_engine();
    case EngineKind::kBlockwise:
      return blockwise_engine();
    case EngineKind::kIpc: {
      const auto it = ipc_.find(key);
      // A group of one (no windows made): the ring, which copies its block in place.
      return it != ipc_.end() && it->second.engine ? *it->second.engine : ring_engine();
    }
    case EngineKind::kTwoLevel: {
      auto& engine = two_level_[f.ranks_per_host];
      if (!engine) engine = make_two_level_engine(f.ranks_per_host);
      return *engine;
    }
    case EngineKind::kNccl:
      break;
  }
  auto& slot = nccl_[key];
  if (!slot) {
    NcclGroupSetup setup;
    setup.position = group.rank();
    setup.net_name = nccl_net_for(level, f.fabric);
    setup.timeout = options_.timeout;
    setup.share_id = [store = store_, id_key = group_key_name("nccl", level, key.second) + "/id",
                      first = group.rank() == 0](const std::string& mine) {
      if (first) {
        store.set(id_key, mine);
        return mine;
      }
      return store.get(id_key);
    };
    setup.members = key.second;
    slot = make_nccl_engine(std::move(setup));
  }
  return *slot;
}

PeerEngine CommunicatorEngines::for_peer(int rank, int peer) const {
  if (rank == peer) return {"self", "this rank"};
  const auto& a = localities_[static_cast<std::size_t>(rank)];
  const auto& b = localities_[static_cast<std::size_t>(peer)];
  if (a.island != b.island) {
    return {"lanes",
            "across islands: Holmes's lanes over the slow tier, device buffers staged through "
            "pinned memory"};
  }
  const GroupLevel level = a.host == b.host ? GroupLevel::kHost : GroupLevel::kIsland;
  // This process's own possibilities: the group's agreement on its first call may take it to the
  // next engine (the log says so).
  try {
    const EngineChoice choice = choose_group_engine(facts(true, level, rank));
    return {engine_kind_name(choice.kind), choice.reason};
  } catch (const Error& e) {
    return {"none", e.what()};
  }
}

}  // namespace holmes::detail
