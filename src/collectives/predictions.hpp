// The cost model's prediction for each algorithm of each collective (the predict functions of
// the algorithm table, algorithm_registry.cpp), all in tuning.cpp so that the formulas can be
// read and calibrated together. Each takes the communicator's hierarchy (at least two ranks),
// the model and the bytes of the whole buffer, and returns microseconds (infinity: cannot run).
#pragma once

#include "collectives/tuning.hpp"

namespace holmes::predictions {

double ring_allreduce(const Hierarchy& h, const CostModel& m, double bytes);
double rd_allreduce(const Hierarchy& h, const CostModel& m, double bytes);
double rhd_allreduce(const Hierarchy& h, const CostModel& m, double bytes);
double hierarchical_allreduce(const Hierarchy& h, const CostModel& m, double bytes);
double shared_memory_allreduce(const Hierarchy& h, const CostModel& m, double bytes);

double ring_reduce_scatter(const Hierarchy& h, const CostModel& m, double bytes);
double hierarchical_reduce_scatter(const Hierarchy& h, const CostModel& m, double bytes);
double ring_allgather(const Hierarchy& h, const CostModel& m, double bytes);
double hierarchical_allgather(const Hierarchy& h, const CostModel& m, double bytes);

double chain_broadcast(const Hierarchy& h, const CostModel& m, double bytes);
double tree_broadcast(const Hierarchy& h, const CostModel& m, double bytes);
double hierarchical_broadcast(const Hierarchy& h, const CostModel& m, double bytes);
double shared_memory_broadcast(const Hierarchy& h, const CostModel& m, double bytes);
double chain_reduce(const Hierarchy& h, const CostModel& m, double bytes);
double tree_reduce(const Hierarchy& h, const CostModel& m, double bytes);
double hierarchical_reduce(const Hierarchy& h, const CostModel& m, double bytes);
double shared_memory_reduce(const Hierarchy& h, const CostModel& m, double bytes);

double pairwise_alltoall(const Hierarchy& h, const CostModel& m, double bytes);
double hierarchical_alltoall(const Hierarchy& h, const CostModel& m, double bytes);

double dissemination_barrier(const Hierarchy& h, const CostModel& m, double bytes);
double hierarchical_barrier(const Hierarchy& h, const CostModel& m, double bytes);
double shared_memory_barrier(const Hierarchy& h, const CostModel& m, double bytes);

// The link probe is never chosen: it runs as it is (CommunicatorImpl::calibrate).
double never(const Hierarchy& h, const CostModel& m, double bytes);

}  // namespace holmes::predictions
