// The algorithms a collective can run with, their names, and which collective has which.
// HOLMES_ALGO and hm_comm_set_algorithm force one; otherwise the cost model (tuning.hpp) picks.
#pragma once

#include <holmes/holmes.h>

#include <optional>
#include <string_view>
#include <vector>

#include "collectives/context.hpp"
#include "core/settings.hpp"

namespace holmes {

enum class Algorithm : std::uint8_t {
  kAuto = HM_ALGO_AUTO,
  kRing = HM_ALGO_RING,
  kRecursiveDoubling = HM_ALGO_RECURSIVE_DOUBLING,
  kHalvingDoubling = HM_ALGO_HALVING_DOUBLING,
  kTree = HM_ALGO_TREE,
  kChain = HM_ALGO_CHAIN,
  kPairwise = HM_ALGO_PAIRWISE,
  kHierarchical = HM_ALGO_HIERARCHICAL,
  kDissemination = HM_ALGO_DISSEMINATION,
  // Every rank of a one-host communicator publishes its buffer in shared memory and reads the
  // ones it needs (transports/shared_board.hpp): small allreduce, broadcast, reduce and barrier,
  // where messages cost more than the data.
  kSharedMemory = HM_ALGO_SHARED_MEMORY,
};

// "ring", "rd", "rhd", "tree", "chain", "pairwise", "hier", "dissemination", "shm"; "auto".
const char* algorithm_name(Algorithm algorithm);
std::optional<Algorithm> algorithm_from_name(std::string_view name);

// The algorithms `kind` can run with, in the order the cost model lists them: the rows of the
// algorithm table (registry.hpp).
const std::vector<Algorithm>& algorithms_for(CollectiveKind kind);
bool algorithm_applies(CollectiveKind kind, Algorithm algorithm);

// The public collective enum and ours.
std::optional<CollectiveKind> collective_from_public(hm_collective_t collective);
std::optional<CollectiveKind> collective_from_name(std::string_view name);

// Forced choices, per collective (kAuto where none): from HOLMES_ALGO, which is either one
// algorithm name for every collective that has it ("ring") or a list of collective=algorithm
// ("allreduce=hier,broadcast=tree"). Throws HM_ERR_INVALID_ARGUMENT naming what is wrong.
struct ForcedAlgorithms {
  Algorithm by_kind[16] = {};
  Algorithm get(CollectiveKind kind) const { return by_kind[static_cast<int>(kind)]; }
  void set(CollectiveKind kind, Algorithm algorithm) {
    by_kind[static_cast<int>(kind)] = algorithm;
  }
  static ForcedAlgorithms parse(std::string_view text);
  static ForcedAlgorithms from_settings(const Settings& settings);
};

}  // namespace holmes
