// How fast a GPU computes a transformer layer. Peak dense bf16 TFLOPS and memory are the
// vendors' figures; the achieved fraction of peak grows with the width of the matrices the
// layer multiplies (hidden / tp): efficiency = max_efficiency * w / (w + half_width). The two
// curve numbers are a documented assumption per GPU (docs/planner.md), the same for every plan.
#pragma once

#include <string>
#include <string_view>

namespace holmes::planner {

struct GpuModel {
  std::string name;
  double peak_tflops = 0;  // dense bf16
  double memory_gb = 0;
  double max_efficiency = 0;  // fraction of peak reached by very wide GEMMs
  double half_width = 0;      // matrix width (hidden / tp) at which half of that is reached

  double efficiency(double width) const { return max_efficiency * width / (width + half_width); }
  // Seconds to run `flops` with matrices of `width`.
  double seconds(double flops, double width) const {
    return flops / (peak_tflops * 1e12 * efficiency(width));
  }
};

// A100 (80 GB), H100, H200, and "cpu" (for emulated clusters on this machine). Unknown or empty
// names give A100 with `known` false so the caller can warn.
GpuModel gpu_preset(std::string_view name, bool* known = nullptr);

}  // namespace holmes::planner
