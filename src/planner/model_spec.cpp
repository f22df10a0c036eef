#include "planner/model_spec.hpp"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/status.hpp"

namespace holmes::planner {
namespace {

// The paper's models (Table of experiments in ../shared/PAPER.md) and a tiny one that the
// local demo can train on two CPU cores.
std::vector<ModelSpec> presets() {
  return {
      {"gpt-3.6b", "gpt", 30, 3072, 32, 2048, 51200, 4, 512, 2, true},
      {"gpt-7.5b", "gpt", 36, 4096, 32, 2048, 51200, 4, 2048, 2, true},
      {"gpt-39.1b", "gpt", 48, 8192, 64, 2048, 51200, 4, 1536, 2, true},
      {"tiny", "gpt", 8, 256, 4, 128, 1024, 4, 64, 4, false},
      // The example trainer's model (examples/trainer): dense float32 layers, no recompute.
      {"mlp", "mlp", 8, 128, 1, 1, 1, 16, 256, 4, false},
  };
}

[[noreturn]] void fail_at(std::string_view source, const YAML::Mark& mark,
                          const std::string& what) {
  fail(HM_ERR_INVALID_ARGUMENT, "{}:{}:{}: {}", source, mark.line + 1, mark.column + 1, what);
}

template <typename T>
T scalar(std::string_view source, const YAML::Node& node, const std::string& key) {
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    fail_at(source, node.Mark(),
            fmt::format("'{}' must be {}, got '{}'", key,
                        std::is_same_v<T, bool> ? "true or false" : "an integer",
                        node.IsScalar() ? node.Scalar() : "a collection"));
  }
}

// A key, name or architecture: a scalar (yaml-cpp's own conversion, which throws
// YAML::Exception rather than a holmes::Error on a collection).
std::string scalar_text(std::string_view source, const YAML::Node& node, const std::string& what) {
  try {
    return node.as<std::string>();
  } catch (const YAML::Exception&) {
    fail_at(source, node.Mark(), fmt::format("{} must be a name, got a collection", what));
  }
}

}  // namespace

bool ModelSpec::mlp() const { return architecture == "mlp"; }

double ModelSpec::params_per_layer() const {
  const double h = hidden;
  return mlp() ? h * h + h : 12 * h * h + 13 * h;
}

double ModelSpec::embedding_params() const {
  if (mlp()) return 0;
  return static_cast<double>(vocab) * hidden + static_cast<double>(seq_len) * hidden;
}

double ModelSpec::layer_flops_per_microbatch() const {
  const double h = hidden, s = seq_len, b = micro_batch;
  const double k = recompute ? 4 : 3;  // forward-equivalents per layer
  // A dense layer's forward is 2 b h^2 FLOPs, its backward twice that.
  if (mlp()) return 2 * k * b * s * h * h;
  return 24 * k * b * s * h * h * (1 + s / (6 * h));
}

double ModelSpec::logits_flops_per_microbatch() const {
  if (mlp()) return 0;
  return 6.0 * micro_batch * seq_len * static_cast<double>(hidden) * vocab;
}

double ModelSpec::flops_per_step() const {
  const double microbatches = static_cast<double>(global_batch) / micro_batch;
  return microbatches * (layers * layer_flops_per_microbatch() + logits_flops_per_microbatch());
}

void ModelSpec::validate() const {
  require(architecture == "gpt" || architecture == "mlp",
          "model '{}': architecture must be gpt or mlp, got '{}'", name, architecture);
  require(layers > 0, "model '{}': layers must be positive, got {}", name, layers);
  require(hidden > 0, "model '{}': hidden must be positive, got {}", name, hidden);
  require(heads > 0 && hidden % heads == 0,
          "model '{}': heads must be positive and divide hidden ({}), got {}", name, hidden, heads);
  require(seq_len > 0, "model '{}': seq_len must be positive, got {}", name, seq_len);
  require(vocab > 0, "model '{}': vocab must be positive, got {}", name, vocab);
  require(micro_batch > 0, "model '{}': micro_batch must be positive, got {}", name, micro_batch);
  require(global_batch >= micro_batch && global_batch % micro_batch == 0,
          "model '{}': global_batch ({}) must be a positive multiple of micro_batch ({})", name,
          global_batch, micro_batch);
  require(dtype_bytes == 1 || dtype_bytes == 2 || dtype_bytes == 4 || dtype_bytes == 8,
          "model '{}': dtype_bytes must be 1, 2, 4 or 8, got {}", name, dtype_bytes);
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const ModelSpec& m : presets()) names.push_back(m.name);
  return names;
}

ModelSpec model_preset(std::string_view name) {
  for (const ModelSpec& m : presets()) {
    if (m.name == name) return m;
  }
  fail(HM_ERR_INVALID_ARGUMENT, "unknown model '{}': give a model file or one of {}", name,
       fmt::join(model_preset_names(), ", "));
}

ModelSpec parse_model_yaml(std::string_view text, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    fail_at(source, e.mark, e.msg);
  }
  if (!root.IsMap()) fail_at(source, root.Mark(), "a model file is a mapping of fields");
  ModelSpec model;
  if (const YAML::Node preset = root["preset"]) {
    try {
      model = model_preset(preset.as<std::string>());
    } catch (const Error& e) {
      fail_at(source, preset.Mark(), e.what());
    } catch (const YAML::Exception&) {
      fail_at(source, preset.Mark(), "'preset' must be a model name");
    }
  }
  const std::vector<std::pair<std::string, int*>> ints = {{"layers", &model.layers},
                                                          {"hidden", &model.hidden},
                                                          {"heads", &model.heads},
                                                          {"seq_len", &model.seq_len},
                                                          {"vocab", &model.vocab},
                                                          {"micro_batch", &model.micro_batch},
                                                          {"global_batch", &model.global_batch},
                                                          {"dtype_bytes", &model.dtype_bytes}};
  for (const auto& entry : root) {
    const std::string key = scalar_text(source, entry.first, "a key");
    if (key == "preset") continue;
    if (key == "name" || key == "architecture") {
      (key == "name" ? model.name : model.architecture) =
          scalar_text(source, entry.second, "'" + key + "'");
      continue;
    }
    if (key == "recompute") {
      model.recompute = scalar<bool>(source, entry.second, key);
      continue;
    }
    bool known = false;
    for (const auto& [name, field] : ints) {
      if (key != name) continue;
      *field = scalar<int>(source, entry.second, key);
      known = true;
    }
    if (!known) {
      fail_at(source, entry.first.Mark(),
              fmt::format("unknown key '{}' (expected preset, name, architecture, layers, hidden, "
                          "heads, seq_len, "
                          "vocab, micro_batch, global_batch, dtype_bytes, recompute)",
                          key));
    }
  }
  if (model.name.empty()) model.name = std::string(source);
  try {
    model.validate();
  } catch (const Error& e) {
    fail(HM_ERR_INVALID_ARGUMENT, "{}: {}", source, e.what());
  }
  return model;
}

ModelSpec load_model(const std::string& spec) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(spec, ec)) return model_preset(spec);
  std::ifstream in(spec);
  require(in.good(), "model file '{}' cannot be read", spec);
  std::stringstream text;
  text << in.rdbuf();
  return parse_model_yaml(text.str(), spec);
}

}  // namespace holmes::planner
