// The same-host engine for device buffers: the members of a host group map each other's device
// "windows" (DeviceMemory::allocate_shared, CUDA IPC on a GPU) once, and every phase then moves
// data device to device, never through host memory:
//   reduce-scatter  each member copies its slices of every block into its window; each member
//                   reduces its own block reading every member's window in one pass
//                   (DeviceMemory::reduce_many: a kernel per 8 windows; members in order, so
//                   the result is the same on every machine);
//   allgather       each member copies its block into its window; each member copies every
//                   other member's block out of that member's window;
//   broadcast       the root copies the data into its window, the others copy it out.
// A round's copies wait once for all of them (DeviceMemory::copy_many), not once each.
// A window is used in two halves, so a member fills one half while the others still read the
// other; a barrier of small messages over the group's own links (shared memory on a host) marks
// each round, and a last one that every member is done reading before any window is reused.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "collectives/engine/group_engine.hpp"

namespace holmes {

// The group's windows as this process sees them.
struct IpcWindows {
  std::vector<std::shared_ptr<std::byte>> at;  // position p's window, mapped here (own included)
  std::size_t bytes = 0;                       // each window's size, the same for every member
};

std::unique_ptr<GroupEngine> make_ipc_engine(IpcWindows windows);

}  // namespace holmes
