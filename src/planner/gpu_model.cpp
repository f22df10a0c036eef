#include "planner/gpu_model.hpp"

#include <vector>

namespace holmes::planner {

GpuModel gpu_preset(std::string_view name, bool* known) {
  // Peak dense bf16 TFLOPS and memory from the vendors' data sheets. The curve (max efficiency,
  // half width) says how close large-model GEMMs come to peak: about 70-80% for hidden sizes of
  // several thousand on A100 and somewhat less on Hopper, whose peak is harder to reach.
  static const std::vector<GpuModel> presets = {
      {"A100", 312, 80, 0.80, 512},
      {"H100", 989, 80, 0.70, 1024},
      {"H200", 989, 141, 0.70, 1024},
      // One CPU core of this machine pretending to be a GPU (the local demo): ~20 GFLOPS.
      {"cpu", 0.02, 8, 1.0, 0},
  };
  for (const GpuModel& gpu : presets) {
    if (gpu.name == name) {
      if (known) *known = true;
      return gpu;
    }
  }
  if (known) *known = false;
  return presets.front();
}

}  // namespace holmes::planner
