// Calibration: link classes measured on a real (or emulated) cluster replace the presets of a
// topology. holmes-bench fits latency and bandwidth to its sendrecv rows and writes them
// (--calibrate CLASS:FILE); holmes-sim and holmes-plan read them back (--calibration FILE).
//
// The file is JSON: {"link_classes": {"<name>": {"gbit_per_s": G, "latency_us": L,
// "points": N, "ranks": R}}}; writing merges into an existing file, one class at a time.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "topology/topology.hpp"

namespace holmes::planner {

struct LinkFit {
  double gbit_per_s = 0;
  double latency_us = 0;
  int points = 0;
};

// Least-squares fit of time = latency + bytes / bandwidth over (bytes, seconds) points. Throws
// HM_ERR_INVALID_ARGUMENT with fewer than two distinct sizes or a fit that is not physical
// (bandwidth not positive); a negative intercept is clamped to 0 latency.
LinkFit fit_link(const std::vector<std::pair<double, double>>& bytes_seconds);

// Writes (merges) `fit` for `link_class` into the calibration file at `path`.
void write_calibration(const std::string& path, const std::string& link_class, const LinkFit& fit,
                       int ranks);

// Replaces the rates and latencies of the link classes the file names. Throws
// HM_ERR_INVALID_ARGUMENT for a malformed file or a class the topology does not declare.
// Returns one line per class changed ("eth-25: 25 -> 9.4 Gbit/s, 30 -> 41 us").
std::vector<std::string> apply_calibration(topology::Topology& topo, const std::string& path);

}  // namespace holmes::planner
