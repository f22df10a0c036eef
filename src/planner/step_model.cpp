#include "planner/step_model.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "collectives/tuning.hpp"
#include "core/status.hpp"

namespace holmes::planner {
namespace {

// The runtime's cost model with a GPU's numbers: reductions run at device-memory speed and
// pipelines use large chunks (as NCCL's do), so the links, not the reduction, set the pace.
// Gradients and activations are device buffers: inside the islands they run on NCCL or Holmes's
// ring, not on the two-level engine, which carries host buffers (CostModel::for_device_buffers).
CostModel gpu_cost_model() {
  CostModel m = CostModel{}.for_device_buffers();
  m.reduce_gbytes_per_s = 1000;
  m.chunk_overhead_us = 1;
  m.chunk_bytes = 4 << 20;
  return m;
}

// Megatron's gradient bucket: 40M parameters.
constexpr double kBucketParams = 40e6;

LinkCost link_cost(const topology::LinkClass& link, double bytes_per_s) {
  return LinkCost{link.latency_us, bytes_per_s / 1e9};
}

}  // namespace

StepModel::StepModel(const topology::Topology& topo, const JobLayout& layout,
                     const ModelSpec& model, const Placement& placement, double device_tflops)
    : model_(model), placement_(placement) {
  const Placement& p = placement;
  const CostModel cost = gpu_cost_model();
  const auto& intra = topo.link_class(topo.intra_host_link);
  // Ranks of stage `s` on host `h` (they share its NICs).
  auto ranks_on_host = [&](int s, int h) {
    int count = 0;
    for (int d = 0; d < p.dp; ++d) {
      for (int t = 0; t < p.tp; ++t) count += layout.host_of_rank[p.rank_at(s, d, t)] == h;
    }
    return count;
  };
  // The runtime's hierarchy for one group of ranks; links between hosts carry 1/`sharing` of a
  // host's NICs (the other groups of the stage on that host use the rest).
  auto group_hierarchy = [&](const std::vector<int>& ranks, int sharing) {
    std::vector<std::string> hosts, islands;
    int other_host = -1;
    const int first_host = layout.host_of_rank[ranks.front()];
    for (int r : ranks) {
      const int h = layout.host_of_rank[r];
      hosts.push_back(topo.hosts[h].name);
      islands.push_back(topo.hosts[h].island);
      if (h != first_host && other_host < 0 &&
          topo.hosts[h].island == topo.hosts[first_host].island)
        other_host = h;
    }
    const auto& host = topo.hosts[first_host];
    LinkCost same_island{0, 1};
    if (other_host >= 0) {
      const auto& link = placement_link(topo, p, first_host, other_host);
      same_island = link_cost(link, topo.host_bandwidth(host, link.name) / sharing);
    }
    const auto& slow = topo.link_class(topo.inter_island_link);
    const LinkCost other_island = link_cost(slow, topo.host_bandwidth(host, slow.name) / sharing);
    return make_hierarchy(hosts, islands, link_cost(intra, intra.bytes_per_s()), same_island,
                          other_island);
  };

  const double activation_bytes =
      static_cast<double>(model.micro_batch) * model.seq_len * model.hidden * model.dtype_bytes;
  gpus_.resize(p.pp);
  tp_allreduce_.assign(p.pp, 0);
  p2p_seconds_.assign(p.pp, 0);
  p2p_to_next_.assign(p.pp, 0);
  dp_by_layers_.assign(p.pp, std::vector<DpCost>(model.layers + 1));
  for (int s = 0; s < p.pp; ++s) {
    const Stage& stage = p.stages[s];
    double slowest = std::numeric_limits<double>::infinity();
    for (int h : stage.hosts) {
      const GpuModel gpu = gpu_preset(topo.hosts[h].gpu_model);
      const double speed = gpu.peak_tflops * gpu.efficiency(double(model.hidden) / p.tp);
      if (speed < slowest) {
        slowest = speed;
        gpus_[s] = gpu;
      }
    }
    if (device_tflops > 0) gpus_[s] = GpuModel{"measured", device_tflops, gpus_[s].memory_gb, 1, 0};
    if (p.tp > 1) {
      std::vector<int> ranks;
      for (int t = 0; t < p.tp; ++t) ranks.push_back(p.rank_at(s, 0, t));
      const Hierarchy h = group_hierarchy(ranks, p.dp);
      tp_allreduce_[s] =
          choose(h, cost, CollectiveKind::kAllreduce, activation_bytes).microseconds / 1e6;
    }
    if (s + 1 < p.pp) {
      // Every rank of the stage sends to its peer of the next one at once: a host's link is
      // shared by the stage's ranks on it.
      const int ha = layout.host_of_rank[p.rank_at(s, 0, 0)];
      const int hb = layout.host_of_rank[p.rank_at(s + 1, 0, 0)];
      const auto& link = placement_link(topo, p, ha, hb);
      const double bandwidth =
          ha == hb
              ? link.bytes_per_s()
              : std::min(topo.host_bandwidth(topo.hosts[ha], link.name) / ranks_on_host(s, ha),
                         topo.host_bandwidth(topo.hosts[hb], link.name) / ranks_on_host(s + 1, hb));
      const double seconds = link.latency_us / 1e6 + activation_bytes / p.tp / bandwidth;
      p2p_to_next_[s] = seconds;
      p2p_seconds_[s] += seconds;
      p2p_seconds_[s + 1] += seconds;
    }
    if (p.dp > 1) {
      std::vector<int> ranks;
      for (int d = 0; d < p.dp; ++d) ranks.push_back(p.rank_at(s, d, 0));
      const Hierarchy h = group_hierarchy(ranks, p.tp);
      const double embedding = (s == 0 ? 1 : 0) + (s == p.pp - 1 ? 1 : 0);
      for (int layers = 1; layers <= model.layers; ++layers) {
        const double params =
            (layers * model.params_per_layer() + embedding * model.embedding_params()) / p.tp;
        DpCost& c = dp_by_layers_[s][layers];
        c.buckets = std::max(1, static_cast<int>(std::ceil(params / kBucketParams)));
        const double bytes = params / c.buckets * model.dtype_bytes;
        c.reduce_scatter_s =
            choose(h, cost, CollectiveKind::kReduceScatter, bytes).microseconds / 1e6;
        c.allgather_s = choose(h, cost, CollectiveKind::kAllgather, bytes).microseconds / 1e6;
      }
    }
  }
}

StageTime StepModel::stage_time(int s, int layers) const {
  const Placement& p = placement_;
  StageTime out;
  const double width = static_cast<double>(model_.hidden) / p.tp;
  double flops = layers * model_.layer_flops_per_microbatch() / p.tp;
  if (s == p.pp - 1) flops += model_.logits_flops_per_microbatch() / p.tp;
  const double compute = gpus_[s].seconds(flops, width);
  out.forward_s = compute * model_.forward_fraction();
  out.backward_s = compute - out.forward_s;
  // Megatron's TP: 2 allreduces per layer in the forward, 2 in the backward, 2 more when the
  // backward recomputes the forward; a dense layer split by columns then rows: 1 and 1.
  const int allreduces = model_.mlp() ? 2 : model_.recompute ? 6 : 4;
  out.tp_comm_s = layers * allreduces * tp_allreduce_[s];
  out.p2p_s = p2p_seconds_[s];
  const DpCost& dp = dp_by_layers_[s][std::clamp(layers, 0, model_.layers)];
  out.dp_reduce_scatter_s = dp.buckets * dp.reduce_scatter_s;
  out.dp_allgather_s = dp.buckets * dp.allgather_s;
  // Memory per GPU: weights in the model's dtype, fp32 gradients, Adam's fp32 master weights and
  // two moments sharded over the DP group; activations of the micro-batches 1F1B keeps in flight
  // (stage inputs only with recompute), plus one layer's working set (Korthikanti et al.).
  const double embedding = (s == 0 ? 1 : 0) + (s == p.pp - 1 ? 1 : 0);
  const double params =
      (layers * model_.params_per_layer() + embedding * model_.embedding_params()) / p.tp;
  const double weights = params * (model_.dtype_bytes + 4 + 12.0 / p.dp);
  const double sbh = static_cast<double>(model_.seq_len) * model_.micro_batch * model_.hidden;
  const double working = model_.mlp()
                             ? sbh * 4 * model_.dtype_bytes
                             : sbh * (34 + 5.0 * model_.heads * model_.seq_len / model_.hidden) *
                                   model_.dtype_bytes / 2 / p.tp;
  const double in_flight = std::min(p.micro_batches, p.pp - s);
  const double kept_per_layer = model_.recompute ? sbh * model_.dtype_bytes / p.tp : working;
  out.memory_gb = (weights + in_flight * layers * kept_per_layer + working) / 1e9;
  return out;
}

void StepModel::simulate(std::vector<StageTime>& stages, const std::vector<int>& layers) const {
  const Placement& p = placement_;
  const int pp = p.pp;
  const int m = p.micro_batches;
  // Each stage's operations in 1F1B order: (p - s - 1) warm-up forwards, then one forward and
  // one backward in turn, then the remaining backwards. true = forward.
  std::vector<std::vector<std::pair<bool, int>>> order(pp);
  for (int s = 0; s < pp; ++s) {
    const int warmup = std::min(pp - s - 1, m);
    for (int i = 0; i < warmup; ++i) order[s].push_back({true, i});
    for (int i = 0; i < m - warmup; ++i) {
      order[s].push_back({true, warmup + i});
      order[s].push_back({false, i});
    }
    for (int i = m - warmup; i < m; ++i) order[s].push_back({false, i});
  }
  constexpr double kNotYet = -1;
  std::vector<std::vector<double>> forward_end(pp, std::vector<double>(m, kNotYet));
  std::vector<std::vector<double>> backward_end(pp, std::vector<double>(m, kNotYet));
  std::vector<std::size_t> next(pp, 0);
  std::vector<double> free_at(pp, 0);
  std::vector<double> last_backward_start(pp, 0);
  // Parameters of this step's first forward: with overlap, the all-gather (buckets in a row,
  // from the step's start) must have delivered the last bucket before that forward can end.
  std::vector<double> params_ready(pp, 0);
  for (int s = 0; s < pp; ++s) {
    const DpCost& dp = dp_by_layers_[s][layers[s]];
    if (p.overlap_dp && p.dp > 1) params_ready[s] = dp.buckets * dp.allgather_s;
  }
  const double tp_forward_share = model_.mlp() ? 0.5 : model_.recompute ? 2.0 / 6 : 2.0 / 4;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < pp; ++s) {
      while (next[s] < order[s].size()) {
        const auto [forward, i] = order[s][next[s]];
        const StageTime& t = stages[s];
        double ready = 0;
        if (forward && s > 0) ready = forward_end[s - 1][i];
        if (!forward && s + 1 < pp) ready = backward_end[s + 1][i];
        if (ready == kNotYet) break;  // its input has not been computed yet
        const double start = std::max(free_at[s], ready);
        double end = 0;
        if (forward) {
          end = start + t.forward_s + t.tp_comm_s * tp_forward_share +
                (s + 1 < pp ? p2p_to_next_[s] : 0);
          if (i == 0 && params_ready[s] > 0) {
            const int buckets = dp_by_layers_[s][layers[s]].buckets;
            end = std::max(end, params_ready[s] + t.forward_s / buckets);
          }
          forward_end[s][i] = end;
        } else {
          if (i == m - 1) last_backward_start[s] = start;
          end = start + t.backward_s + t.tp_comm_s * (1 - tp_forward_share) +
                (s > 0 ? p2p_to_next_[s - 1] : 0);
          backward_end[s][i] = end;
        }
        free_at[s] = end;
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < pp; ++s) {
    require(next[s] == order[s].size(), "1F1B schedule stalled at stage {}", s);  // a bug
    StageTime& t = stages[s];
    t.compute_s = m * (t.forward_s + t.backward_s);
    t.comm_s = m * (t.tp_comm_s + t.p2p_s);
    const double backward_done = backward_end[s][m - 1];
    double end = backward_done;
    if (p.dp > 1) {
      const DpCost& dp = dp_by_layers_[s][layers[s]];
      if (p.overlap_dp) {
        // Buckets become ready as the last backward's compute walks down the layers; they are
        // reduced one after another on one stream.
        double stream = 0;
        for (int k = 0; k < dp.buckets; ++k) {
          const double ready = last_backward_start[s] + t.backward_s * (k + 1) / dp.buckets;
          stream = std::max(stream, ready) + dp.reduce_scatter_s;
        }
        end = std::max(end, stream);
      } else {
        end += dp.buckets * (dp.reduce_scatter_s + dp.allgather_s);
      }
    }
    t.end_s = end;
    t.dp_exposed_s = end - backward_done;
    t.bubble_s = std::max(0.0, end - t.compute_s - t.comm_s - t.dp_exposed_s);
  }
}

StepPrediction StepModel::predict(const std::vector<int>& layers) const {
  const Placement& p = placement_;
  require(static_cast<int>(layers.size()) == p.pp, "{} layer counts for {} stages", layers.size(),
          p.pp);
  StepPrediction out;
  for (int s = 0; s < p.pp; ++s) {
    require(layers[s] >= 0 && layers[s] <= model_.layers, "stage {}: {} layers", s, layers[s]);
    out.stages.push_back(stage_time(s, layers[s]));
  }
  simulate(out.stages, layers);
  for (int s = 0; s < p.pp; ++s) {
    if (out.stages[s].end_s > out.stages[out.bottleneck_stage].end_s) out.bottleneck_stage = s;
  }
  const StageTime& b = out.stages[out.bottleneck_stage];
  out.step_s = b.end_s;
  out.compute_s = b.compute_s;
  out.bubble_s = b.bubble_s;
  out.exposed_comm_s = out.step_s - out.compute_s - out.bubble_s;
  out.dp_exposed_s = b.dp_exposed_s;
  out.samples_per_s = model_.global_batch / out.step_s;
  out.tokens_per_s = out.samples_per_s * model_.seq_len;
  const double gpus = static_cast<double>(p.tp) * p.pp * p.dp;
  out.tflops_per_gpu = model_.flops_per_step() / out.step_s / gpus / 1e12;
  return out;
}

StepPrediction StepModel::predict() const {
  std::vector<int> layers;
  for (const Stage& s : placement_.stages) layers.push_back(s.layers);
  return predict(layers);
}

double StepModel::step_seconds(const std::vector<int>& layers) const {
  return predict(layers).step_s;
}

}  // namespace holmes::planner
