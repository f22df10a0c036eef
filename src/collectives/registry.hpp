// The table of every collective's algorithms: one entry per (collective, algorithm), holding how
// to run it and how long the cost model predicts it takes, each with one signature for all. The
// cost model's choice (tuning.hpp choose), hm_comm_set_algorithm's check (algorithms_for) and the
// communicator's dispatch all read this one table.
//
// To add an algorithm: give it an Algorithm (algorithm.hpp, and hm_algorithm_t for the C API),
// write it over CollectiveContext (one file, e.g. ring.cpp), its prediction in tuning.cpp, and
// one row in algorithm_registry.cpp, in the order the cost model should consider it.
#pragma once

#include <holmes/holmes.h>

#include <cstddef>
#include <span>

#include "collectives/algorithm.hpp"
#include "collectives/context.hpp"
#include "collectives/tuning.hpp"

namespace holmes {

// One collective call as the communicator validated it (count: per rank for reduce_scatter,
// allgather and alltoall, as in the calls).
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  hm_dtype_t dtype = HM_UINT8;
  hm_op_t op = HM_SUM;
  int root = 0;
};

// Runs the call over `ctx` (the whole communicator). `h` says where the ranks sit (the flat
// rings and chains follow its ring order; the hierarchical algorithms its islands), `model` is
// the cost model the hierarchical ones choose their inner steps with.
using RunAlgorithm = void (*)(CollectiveContext& ctx, const Hierarchy& h, const CostModel& model,
                              const CollectiveCall& call);
// Microseconds for a call moving `bytes` (the whole buffer: for allgather and reduce_scatter all
// ranks' blocks) on a communicator of at least two ranks; infinity where it cannot run.
using PredictAlgorithm = double (*)(const Hierarchy& h, const CostModel& model, double bytes);

struct AlgorithmEntry {
  CollectiveKind kind;
  Algorithm algorithm;
  RunAlgorithm run;
  PredictAlgorithm predict;
};

// Every entry: per collective, its algorithms in the order the cost model considers them (the
// first is the default and wins ties).
std::span<const AlgorithmEntry> algorithm_entries();
// The entry of `algorithm` for `kind`; nullptr when the collective does not have it.
const AlgorithmEntry* find_algorithm(CollectiveKind kind, Algorithm algorithm);

}  // namespace holmes
