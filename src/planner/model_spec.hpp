// What the planner plans for: a GPT-style transformer (layers of attention + MLP, a vocabulary
// embedding shared by the first and last stage) and the batch the trainer runs, plus the
// constraints the user sets. FLOPs follow Megatron-LM's formula so that TFLOPS per GPU compare
// with published numbers.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace holmes::planner {

struct ModelSpec {
  std::string name;
  // "gpt": transformer layers (attention + MLP, Megatron's FLOPs); "mlp": plain dense layers of
  // hidden x hidden (y = f(W x + b)), as the example trainer runs; seq_len is then 1.
  std::string architecture = "gpt";
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int seq_len = 0;
  int vocab = 51200;
  int micro_batch = 1;   // samples per micro-batch
  int global_batch = 0;  // samples per step (all data-parallel replicas together)
  int dtype_bytes = 2;   // bf16/fp16 weights, activations and gradients on the wire
  // Full activation recompute (Megatron's --recompute-granularity full): backward re-runs the
  // forward, 4 forward-equivalents per layer instead of 3.
  bool recompute = true;

  bool mlp() const;
  // Parameters of one transformer layer (attention 4h^2 + MLP 8h^2 + biases and norms).
  double params_per_layer() const;
  // Parameters of the embedding (vocab x hidden, plus positions).
  double embedding_params() const;
  // FLOPs of one transformer layer, forward and backward (with recompute when set), for one
  // micro-batch; and of the logits layer (last stage) for one micro-batch.
  double layer_flops_per_microbatch() const;
  double logits_flops_per_microbatch() const;
  // Megatron's FLOPs per step: 24k B s L h^2 (1 + s/(6h) + V/(4kLh)), k = 4 with recompute
  // and 3 without (96 and 72 in the paper's form).
  double flops_per_step() const;
  // The share of a layer's work done in the forward pass (1/4 with recompute, 1/3 without).
  double forward_fraction() const { return recompute ? 0.25 : 1.0 / 3.0; }

  // Throws HM_ERR_INVALID_ARGUMENT naming the first field out of range.
  void validate() const;
};

// Models of the Holmes paper (and a small one for the local demo): gpt-3.6b, gpt-7.5b,
// gpt-39.1b, tiny. Throws naming the known presets when `name` is none of them.
ModelSpec model_preset(std::string_view name);
std::vector<std::string> model_preset_names();

// A model from a YAML file (keys as the fields above; `preset: gpt-7.5b` starts from a preset)
// or, when `spec` names no file, a preset. Errors carry file:line:column.
ModelSpec load_model(const std::string& spec);
ModelSpec parse_model_yaml(std::string_view text, std::string_view source_name);

// Constraints the user sets; 0 means "let the planner choose".
struct PlanConstraints {
  int tp = 0;
  int pp = 0;
  double gpu_memory_gb = 0;  // 0: the GPU preset's memory
  // 0: each GPU model's preset speed; else what every device was measured to reach on this
  // model's layers (TFLOPS), e.g. by the trainer before planning.
  double device_tflops = 0;
  std::string schedule = "1f1b";
};

}  // namespace holmes::planner
