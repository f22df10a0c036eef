// What carries the phases a hierarchical collective runs inside one group of ranks: the ranks of
// a host, or of an island. The hierarchical collectives (hierarchical/) compose a group engine
// inside the groups with Holmes's own lanes across islands, so a group of GPUs on one fabric can
// run on the best engine for it (NCCL, engine/nccl_engine.cpp) while the slow tier stays Holmes's.
//
//   ring       Holmes's own ring over its transports (ring_engine.cpp); any buffers.
//   blockwise  each block reduced to its owner, then broadcast from it (blockwise.hpp): the way
//              NCCL carries uneven blocks, here over Holmes's transports, so the composition the
//              NCCL engine uses is exercised (and tested) on machines without a GPU.
//   nccl       the same decomposition on NCCL communicators Holmes creates per group, for device
//              buffers (builds with NCCL).
//   ipc        inside a host, device buffers read from each other's windows (ipc_engine.hpp).
//   two-level  an island whose hosts hold several ranks each, host buffers: across hosts between
//              the ranks at one place, then inside each host (two_level_engine.hpp).
//
// The communicator picks one per group (communicator/group_engines.hpp) and says which in its
// per-peer report (hm_comm_peer_engine).
#pragma once

#include <holmes/holmes.h>

#include <cstddef>
#include <string_view>

#include "collectives/context.hpp"
#include "collectives/pipeline.hpp"

namespace holmes {

// The level of the hierarchy a group belongs to.
enum class GroupLevel { kHost, kIsland };

class GroupEngine {
 public:
  virtual ~GroupEngine() = default;
  virtual std::string_view name() const = 0;

  // As ring_reduce_scatter_blocks: position r of `group` ends with block r of `layout` reduced
  // (AVG as SUM, divided by `average_over` when that is not 0) in `own_out`.
  virtual void reduce_scatter_blocks(CollectiveContext& group, const std::byte* in,
                                     std::byte* own_out, const BlockLayout& layout,
                                     hm_dtype_t dtype, hm_op_t op, int average_over) = 0;
  // As ring_allgather_blocks: `buffer` holds block r of position r; every position ends with
  // every block.
  virtual void allgather_blocks(CollectiveContext& group, std::byte* buffer,
                                const BlockLayout& layout, hm_dtype_t dtype) = 0;
  // `bytes` of `buffer` from position `root` to every position of `group`; false (nothing done)
  // where the engine has no broadcast of its own and the caller's chain or tree should run.
  virtual bool broadcast(CollectiveContext& group, std::byte* buffer, std::size_t bytes, int root) {
    (void)group, (void)buffer, (void)bytes, (void)root;
    return false;
  }
};

// Picks the engine of each group; the communicator's (group_engines.hpp) reaches the collectives
// through CollectiveResources. Without one (tests that build a context by hand), every group runs
// on the ring.
class GroupEngines {
 public:
  virtual ~GroupEngines() = default;
  // The engine for `group`, a view of the ranks of one host or island; the same on every member.
  virtual GroupEngine& for_group(const CollectiveContext& group, GroupLevel level) = 0;
};

// The stateless engines (one instance each, immutable).
GroupEngine& ring_engine();
GroupEngine& blockwise_engine();

}  // namespace holmes
