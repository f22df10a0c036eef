// Which engine carries each group of device buffers (collectives/engine/), and the state the
// stateful engines keep per group: the IPC windows the members of a host map, the NCCL
// communicators made for hosts and islands.
//
// The choice (choose_group_engine) reads only what every member of a group agrees on: the
// setting HOLMES_GROUP_ENGINE (an agreed setting), the group's level (a group whose members share
// a host is a host's, whatever the collective calls it), fabric and hosts, whether the buffers
// are on a device, and, told to each other through the job's store on the group's first call on
// device buffers, whether every member maps every other's device memory (ipc) and whether NCCL runs
// for every member. A member that cannot takes the whole group to the next engine rather than
// hanging it. As with NCCL itself, every member of a group must pass device buffers.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/device_memory.hpp"
#include "collectives/engine/group_engine.hpp"
#include "topology/locality.hpp"

namespace holmes::detail {

enum class EngineKind { kRing, kBlockwise, kIpc, kNccl, kTwoLevel };
const char* engine_kind_name(EngineKind kind);

struct EngineChoice {
  EngineKind kind = EngineKind::kRing;
  std::string reason;
};

struct EngineFacts {
  std::string setting = "auto";  // HOLMES_GROUP_ENGINE: auto, ring, blockwise, ipc, nccl
  bool device_buffers = false;
  GroupLevel level = GroupLevel::kHost;  // kHost: every member on one host
  std::string fabric;                    // the island's fabric (ib, roce, ethernet)
  // An island's group whose positions lie host after host, this many (>= 2) on each of 2 or more
  // hosts (two_level_ranks_per_host); 0 otherwise.
  int ranks_per_host = 0;
  bool ipc_usable = false;  // every member maps every other's device memory (a host's group)
  std::string ipc_why_not;  // when not usable
  bool nccl_usable = false;
  std::string nccl_why_not;  // when not usable
};

// The engine for a group; HM_ERR_UNSUPPORTED when `ipc` or `nccl` is forced where it cannot run.
EngineChoice choose_group_engine(const EngineFacts& facts);

// Whether host buffers in an island group of the two-level engine's shape take it under the
// HOLMES_GROUP_ENGINE value `setting` (as choose_group_engine decides): the cost model prices
// the islands' phases by it.
bool host_buffers_take_two_level(const std::string& setting);

// What carries device buffers between two ranks, for the per-peer report (hm_comm_peer_engine).
struct PeerEngine {
  std::string engine;  // "ring", "blockwise", "ipc", "nccl", "lanes" (across islands), "self"
  std::string reason;
};

// The job's store under a communicator's own prefix: `get` waits for a key that is not set yet,
// up to the communicator's timeout.
struct EngineStore {
  std::function<void(const std::string& key, const std::string& value)> set;
  std::function<std::string(const std::string& key)> get;
};

// Every member of a group (`members`, communicator ranks; this one at `position`) says through
// `store`, under `key`, whether an engine can run where it is (`usable`, else `why_not`). Empty
// when it can for all, else which member it cannot for and why, as "<refusal> for rank R of the
// group: <why>" (refusal: "NCCL does not run", say).
std::string why_not_for_group(const EngineStore& store, const std::string& key,
                              const std::vector<int>& members, int position, bool usable,
                              const std::string& why_not, const std::string& refusal);

struct EngineOptions {
  std::string setting = "auto";                          // HOLMES_GROUP_ENGINE
  std::size_t ipc_window_bytes = std::size_t{64} << 20;  // HOLMES_IPC_WINDOW_BYTES
  std::chrono::milliseconds timeout{0};                  // the communicator's, for the NCCL engine
  // The process's device memory (nullptr without one), for the per-peer report.
  std::function<DeviceMemory*()> process_device;
};

class CommunicatorEngines final : public GroupEngines {
 public:
  CommunicatorEngines(EngineOptions options, std::vector<Locality> localities, EngineStore store);
  ~CommunicatorEngines() override;

  GroupEngine& for_group(const CollectiveContext& group, GroupLevel level) override;
  PeerEngine for_peer(int rank, int peer) const;

 private:
  using GroupKey = std::pair<int, std::vector<int>>;  // level, members (communicator ranks)
  // A host group's windows, or why its members cannot share them; decided on its first call.
  struct IpcGroup {
    std::unique_ptr<GroupEngine> engine;
    std::string why_not;
  };

  // kHost for a group whose members all share a host.
  GroupLevel level_of(const std::vector<int>& members, GroupLevel level) const;
  EngineFacts facts(bool device_buffers, GroupLevel level, int some_member) const;
  // EngineFacts::ranks_per_host of a group of `members` (communicator ranks).
  int ranks_per_host(const std::vector<int>& members) const;
  IpcGroup set_up_ipc(const CollectiveContext& group, const std::vector<int>& members) const;

  EngineOptions options_;
  std::vector<Locality> localities_;
  EngineStore store_;
  std::mutex mutex_;
  std::map<GroupKey, IpcGroup> ipc_;
  std::map<GroupKey, std::string> group_why_not_nccl_;  // the groups' agreements, once each
  std::map<GroupKey, std::unique_ptr<GroupEngine>> nccl_;
  std::map<int, std::unique_ptr<GroupEngine>> two_level_;  // by ranks per host
};

}  // namespace holmes::detail
