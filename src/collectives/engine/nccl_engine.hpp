// The NCCL engine (nccl_engine.cpp): a group's phases on an NCCL communicator of the group's
// members, for device buffers. Built when Holmes is built with NCCL (HOLMES_WITH_NCCL), which it
// loads at run time (libnccl.so.2), so a build with NCCL runs where NCCL is not installed.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/engine/group_engine.hpp"

namespace holmes {

// Whether NCCL can run in this process: built with it, libnccl.so.2 loads and has what the engine
// calls, and a CUDA device is usable. When not, *why (if given) says why. Decided once.
bool nccl_usable(std::string* why = nullptr);

struct NcclGroupSetup {
  std::vector<int> members;  // communicator ranks, in the group's order
  int position = 0;          // this rank's position among them
  // NCCL's network for the group (ncclConfig_t netName): "IB" for an RDMA island, "Socket" for
  // an Ethernet one, empty for a host (NCCL's own choice: NVLink, PCIe, shared memory). Per
  // communicator, so each island's groups use their own fabric: the reason one NCCL communicator
  // cannot span islands of different fabrics, and per-island ones can.
  std::string net_name;
  // Hands the first member's unique id to the others (group_engines.hpp's ShareValue, keyed).
  std::function<std::string(const std::string& mine)> share_id;
  std::chrono::milliseconds timeout{0};
};

// The engine; its communicator is made on the group's first call. HM_ERR_UNSUPPORTED where
// nccl_usable() is false.
std::unique_ptr<GroupEngine> make_nccl_engine(NcclGroupSetup setup);

}  // namespace holmes
