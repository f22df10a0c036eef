// Which engine carries each group of a hierarchical collective (collectives/engine/), and the
// NCCL communicators the communicator made for its groups.
//
// The choice (choose_group_engine) reads only what every member of a group agrees on: the
// setting HOLMES_GROUP_ENGINE (an agreed setting), the group's level and fabric, whether the
// buffers are on a device, and whether NCCL runs for every member, which the members tell each
// other through the job's store on the group's first call on device buffers (a host without
// libnccl or a GPU beside hosts with both takes the whole group to the ring rather than hanging
// it). With NCCL, as with NCCL itself, every member of a group must pass device buffers.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/engine/group_engine.hpp"
#include "topology/locality.hpp"

namespace holmes::detail {

enum class EngineKind { kRing, kBlockwise, kNccl };
const char* engine_kind_name(EngineKind kind);

struct EngineChoice {
  EngineKind kind = EngineKind::kRing;
  std::string reason;
};

struct EngineFacts {
  std::string setting = "auto";  // HOLMES_GROUP_ENGINE: auto, ring, blockwise, nccl
  bool device_buffers = false;
  GroupLevel level = GroupLevel::kHost;
  std::string fabric;  // the island's fabric (ib, roce, ethernet); unused for a host
  bool nccl_usable = false;
  std::string nccl_why_not;  // when not usable
};

// The engine for a group; HM_ERR_UNSUPPORTED when `nccl` is forced and NCCL cannot run here.
EngineChoice choose_group_engine(const EngineFacts& facts);

// What carries device buffers between two ranks, for the per-peer report (hm_comm_peer_engine).
struct PeerEngine {
  std::string engine;  // "ring", "blockwise", "nccl", "lanes" (across islands) or "self"
  std::string reason;
};

// The job's store under a communicator's own prefix: `get` waits for a key that is not set yet,
// up to the communicator's timeout.
struct EngineStore {
  std::function<void(const std::string& key, const std::string& value)> set;
  std::function<std::string(const std::string& key)> get;
};

// Every member of a group (`members`, communicator ranks; this one at `position`) says through
// `store`, under `key`, whether NCCL runs where it is (`usable`, else `why_not`). Empty when it
// runs for all, else which member it does not run for, and why.
std::string why_not_nccl_for_group(const EngineStore& store, const std::string& key,
                                   const std::vector<int>& members, int position, bool usable,
                                   const std::string& why_not);

class CommunicatorEngines final : public GroupEngines {
 public:
  CommunicatorEngines(std::string setting, std::vector<Locality> localities, EngineStore store,
                      std::chrono::milliseconds timeout);
  ~CommunicatorEngines() override;

  GroupEngine& for_group(const CollectiveContext& group, GroupLevel level) override;
  PeerEngine for_peer(int rank, int peer) const;

 private:
  using GroupKey = std::pair<int, std::vector<int>>;  // level, members (communicator ranks)

  EngineFacts facts(bool device_buffers, GroupLevel level, int some_member) const;

  std::string setting_;
  std::vector<Locality> localities_;
  EngineStore store_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::map<GroupKey, std::string> group_why_not_nccl_;  // the groups' agreements, once each
  std::map<GroupKey, std::unique_ptr<GroupEngine>> nccl_;
};

}  // namespace holmes::detail
