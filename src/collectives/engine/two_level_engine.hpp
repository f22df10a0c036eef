// The engine of an island's group whose hosts each hold several of its ranks, for host buffers:
// a block crosses between hosts once, from its rank to the rank at the same place on every other
// host (its counterparts), and spreads inside each host over the host's shared memory.
//
// Holmes's ring over such a group (hosts one after the other) carries every block through every
// host: of its n - 1 hops, H - 1 go between hosts (H hosts), each to a rank that passes it on to
// its host mates. Here each block crosses to the H - 1 other hosts once and reaches their P - 1
// other ranks over shared memory: on 2 hosts of 2 ranks, 4 transfers between hosts and 8 inside
// them against the ring's 6 and 6. A transfer between hosts costs the kernel's socket copies
// where shared memory costs two memory copies, so with the cores shared (the emulated islands)
// or an island on Ethernet it is the dearer one.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "collectives/engine/group_engine.hpp"

namespace holmes {

// P when a group's positions lie host after host, P >= 2 of them on each of 2 to
// kTwoLevelMaxHosts hosts (`host_of`: each position's host, any numbering); 0 otherwise.
int two_level_ranks_per_host(std::span<const int> host_of);
constexpr int kTwoLevelMaxHosts = 63;

// The engine for groups of `ranks_per_host` (>= 2) ranks per host, as two_level_ranks_per_host
// found them; stateless beyond that.
std::unique_ptr<GroupEngine> make_two_level_engine(int ranks_per_host);

}  // namespace holmes
