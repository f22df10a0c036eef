// Nominal link numbers: what Holmes assumes for a link that nothing measured (HOLMES_COST_PROBE)
// and no topology file or setting describes, all in one place. There are two sets, for two
// different questions, and they differ on purpose:
//  - link classes: the hardware's line rate and one-way latency, as a topology file states them.
//    The planner's job topology gives them to fabrics a job has no file for
//    (planner/job_topology.cpp), and the shaping layer emulates them (HOLMES_SHAPING=1 without
//    a file); discovery gives the NICs it finds their sysfs rate and a latency of this kind.
//    The planner predicts training steps whose collectives run at line rate on GPU engines.
//  - transport tiers: what Holmes's own transports carry between two ranks' host buffers, CPU
//    copies and protocol costs included (the cost model, collectives/tuning.hpp). They sit well
//    below the line rates: the cost model chooses among host-staged algorithms, whose speed is
//    bound by memory copies and sockets, not by the wire.
#pragma once

namespace holmes::nominal {

struct LinkClassFigures {
  double gbit_per_s;
  double latency_us;
};

// The job topology's default classes (names "default-intra-host", "default-ib", ...).
inline constexpr LinkClassFigures kIntraHost{2400, 2};  // NVLink-class GPU interconnect
inline constexpr LinkClassFigures kIb{200, 2};          // HDR InfiniBand
inline constexpr LinkClassFigures kRoce{100, 4};        // 100 GbE RoCE
inline constexpr LinkClassFigures kEthernet{10, 50};    // 10 GbE TCP between islands

// Latencies discovery gives the NICs it finds (their rates come from sysfs; it does not measure
// latency): typical one-way figures of one hop (verbs ping-pong on HDR/EDR, RoCE through one
// switch, kernel TCP on a datacenter NIC), where the defaults above stand for a path through a
// fabric of unknown size. Kept apart: holmes-topo's merged classes, and plans made from them,
// carry these numbers.
inline constexpr double kDiscoveredIbLatencyUs = 2;
inline constexpr double kDiscoveredRoceLatencyUs = 3;
inline constexpr double kDiscoveredEthernetLatencyUs = 30;

struct TierFigures {
  double latency_us;
  double gbytes_per_s;
};

// The cost model's tiers (HOLMES_COST_* set them; the registry's defaults are these).
inline constexpr TierFigures kShmTier{10, 4.0};  // same host, shared memory: a CPU copy
// Same host over loopback tcp (forced). Measured here: an 8-byte rd allreduce on 4 ranks (two
// rounds) took 59-93 us, median 63, in five compare-local runs (BENCHMARKS.md, 2026-12-02):
// about 25 us per message plus the chunk. Its rate also stands for what one rank on a core of its
// own moves through the kernel's tcp, where ranks share cores (CostModel::crowded).
inline constexpr TierFigures kHostTcpTier{25, 1.0};
inline constexpr TierFigures kIslandRdmaTier{5, 12.0};     // one RDMA island: ~100 Gbit/s
inline constexpr TierFigures kIslandTcpTier{50, 1.25};     // one island over tcp: ~10 Gbit/s
inline constexpr TierFigures kInterIslandTier{100, 1.25};  // between islands: ~10 Gbit/s
inline constexpr double kReduceGbytesPerS = 3.0;           // CPU reduction, bytes of result

}  // namespace holmes::nominal
