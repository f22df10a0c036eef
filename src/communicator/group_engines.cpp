#include "communicator/group_engines.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "collectives/context.hpp"
#include "collectives/engine/nccl_engine.hpp"
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

// The group's own part of the store's keys: "nccl/island/0/2/4".
std::string group_key_name(GroupLevel level, const std::vector<int>& members) {
  std::string key = fmt::format("nccl/{}", level_name(level));
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
    case EngineKind::kNccl:
      return "nccl";
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
    return {EngineKind::kRing, fmt::format("host buffers {}: Holmes's ring", where)};
  }
  if (f.setting == "nccl") {
    if (!f.nccl_usable) {
      fail(HM_ERR_UNSUPPORTED, "HOLMES_GROUP_ENGINE=nccl, but NCCL cannot run here: {}",
           f.nccl_why_not);
    }
    return {EngineKind::kNccl, fmt::format("HOLMES_GROUP_ENGINE=nccl, device buffers {}", where)};
  }
  if (f.nccl_usable) {
    return {EngineKind::kNccl,
            fmt::format("device buffers {}: NCCL, the fastest engine on one fabric", where)};
  }
  return {EngineKind::kRing,
          fmt::format("device buffers {}: Holmes's ring, staged through pinned memory (no NCCL: "
                      "{})",
                      where, f.nccl_why_not)};
}

CommunicatorEngines::CommunicatorEngines(std::string setting, std::vector<Locality> localities,
                                         EngineStore store, std::chrono::milliseconds timeout)
    : setting_(std::move(setting)),
      localities_(std::move(localities)),
      store_(std::move(store)),
      timeout_(timeout) {}

CommunicatorEngines::~CommunicatorEngines() = default;

EngineFacts CommunicatorEngines::facts(bool device_buffers, GroupLevel level,
                                       int some_member) const {
  EngineFacts f;
  f.setting = setting_;
  f.device_buffers = device_buffers;
  f.level = level;
  if (some_member >= 0 && static_cast<std::size_t>(some_member) < localities_.size()) {
    f.fabric = localities_[static_cast<std::size_t>(some_member)].fabric;
  }
  // Decided once per process, on first need (libnccl is loaded then, not at every creation).
  f.nccl_usable = nccl_usable(&f.nccl_why_not);
  return f;
}

std::string why_not_nccl_for_group(const EngineStore& store, const std::string& key,
                                   const std::vector<int>& members, int position, bool usable,
                                   const std::string& why_not) {
  const std::string prefix = key + "/usable/";
  store.set(prefix + std::to_string(position), usable ? "yes" : "no: " + why_not);
  for (std::size_t p = 0; p < members.size(); ++p) {
    const std::string said = store.get(prefix + std::to_string(p));
    if (said != "yes") {
      return fmt::format("NCCL does not run for rank {} of the group: {}", members[p],
                         said.rfind("no: ", 0) == 0 ? said.substr(4) : "it said '" + said + "'");
    }
  }
  return "";
}

GroupEngine& CommunicatorEngines::for_group(const CollectiveContext& group, GroupLevel level) {
  EngineFacts f = facts(group.on_device(), level, group.member(0));
  GroupKey key{static_cast<int>(level), {}};
  for (int p = 0; p < group.size(); ++p) key.second.push_back(group.member(p));
  std::lock_guard lock(mutex_);
  if (f.setting == "auto" && f.device_buffers) {
    // NCCL for the group only where it runs for every member; asked once per group.
    auto [agreed, fresh] = group_why_not_nccl_.try_emplace(key);
    if (fresh) {
      agreed->second = why_not_nccl_for_group(store_, group_key_name(level, key.second), key.second,
                                              group.rank(), f.nccl_usable, f.nccl_why_not);
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
    case EngineKind::kNccl:
      break;
  }
  auto& slot = nccl_[key];
  if (!slot) {
    NcclGroupSetup setup;
    setup.position = group.rank();
    setup.net_name = nccl_net_for(level, f.fabric);
    setup.timeout = timeout_;
    setup.share_id = [store = store_, id_key = group_key_name(level, key.second) + "/id",
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
  try {
    const EngineChoice choice = choose_group_engine(facts(true, level, rank));
    return {engine_kind_name(choice.kind), choice.reason};
  } catch (const Error& e) {
    return {"none", e.what()};
  }
}

}  // namespace holmes::detail
