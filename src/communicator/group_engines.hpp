// Which engine carries each group of a hierarchical collective (collectives/engine/), and the
// NCCL communicators the communicator made for its groups.
//
// The choice (choose_group_engine) reads only what every member of a group agrees on: the
// setting HOLMES_GROUP_ENGINE (an agreed setting), the group's level and fabric, whether the
// buffers are on a device, and whether NCCL can run here. With NCCL, as with NCCL itself, every
// member of a group must pass device buffers.
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

class CommunicatorEngines final : public GroupEngines {
 public:
  // Hands a value to the group's other members through the job's store: the first member calls
  // it with its value, the others with an empty string, and everyone gets the first's.
  using ShareValue = std::function<std::string(const std::string& key, const std::string& mine)>;

  CommunicatorEngines(std::string setting, std::vector<Locality> localities, ShareValue share,
                      std::chrono::milliseconds timeout);
  ~CommunicatorEngines() override;

  GroupEngine& for_group(const CollectiveContext& group, GroupLevel level) override;
  PeerEngine for_peer(int rank, int peer) const;

 private:
  EngineFacts facts(bool device_buffers, GroupLevel level, int some_member) const;

  std::string setting_;
  std::vector<Locality> localities_;
  ShareValue share_;
  std::chrono::milliseconds timeout_;
  bool nccl_usable_ = false;
  std::string nccl_why_not_;
  std::mutex mutex_;
  // NCCL engines by level and members (communicator ranks).
  std::map<std::pair<int, std::vector<int>>, std::unique_ptr<GroupEngine>> nccl_;
};

}  // namespace holmes::detail
