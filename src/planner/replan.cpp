#include "planner/replan.hpp"

#include <algorithm>
#include <optional>

#include "core/status.hpp"

namespace holmes::planner {
namespace {

struct Shape {
  Placement placement;
  StepPrediction step;
};

double peak_memory_gb(const StepPrediction& step) {
  double memory = 0;
  for (const StageTime& st : step.stages) memory = std::max(memory, st.memory_gb);
  return memory;
}

// The global batch's micro-batches over p.dp replicas: the first ones take one more when they
// do not divide.
void divide_batch(const ModelSpec& model, Placement& p) {
  const int total = model.global_batch / model.micro_batch;
  p.replica_micro_batches.assign(p.dp, total / p.dp);
  for (int d = 0; d < total % p.dp; ++d) ++p.replica_micro_batches[d];
  p.micro_batches = p.replica_micro_batches.front();
}

// Finishes `p` (grid and degrees set) on the survivors, splits the batch, predicts it with
// `layers` per stage (empty: the split that minimises the step). nullopt, with `why`, when it
// does not fit in memory.
std::optional<Shape> predict_shape(const Plan& old, const JobTopology& job, Placement p,
                                   std::vector<int> layers, std::string& why) {
  p.stages.assign(p.pp, Stage{0, 1, {}, ""});
  finish_placement(job.topology, job.layout, p);
  divide_batch(old.model, p);
  const StepModel step_model(job.topology, job.layout, old.model, p, old.constraints.device_tflops);
  if (layers.empty()) layers = partition_layers(step_model, p.pp);
  set_layers(p, layers);
  StepPrediction step = step_model.predict(layers);  // before p moves: the model refers to it
  Shape shape{std::move(p), std::move(step)};
  const double memory = peak_memory_gb(shape.step);
  if (memory > old.gpu_memory_gb) {
    why = fmt::format("needs {:.1f} GB per GPU, more than {:.1f} GB", memory, old.gpu_memory_gb);
    return std::nullopt;
  }
  return shape;
}

// Rule 2: the replicas that kept every rank, with their stages and layers as they were.
std::optional<Shape> drop_replicas(const Plan& old, const JobTopology& job,
                                   const std::vector<int>& new_of_old, std::string& why) {
  const Placement& was = old.holmes;
  std::vector<int> whole;
  for (int d = 0; d < was.dp; ++d) {
    bool intact = true;
    for (int s = 0; s < was.pp; ++s) {
      for (int t = 0; t < was.tp; ++t) intact = intact && new_of_old[was.rank_at(s, d, t)] >= 0;
    }
    if (intact) whole.push_back(d);
  }
  if (whole.empty()) {
    why = fmt::format("every one of the {} data-parallel replicas lost a rank", was.dp);
    return std::nullopt;
  }
  Placement p;
  p.name = "holmes";
  p.tp = was.tp;
  p.pp = was.pp;
  p.dp = static_cast<int>(whole.size());
  for (int s = 0; s < was.pp; ++s) {
    for (int d : whole) {
      for (int t = 0; t < was.tp; ++t) p.grid.push_back(new_of_old[was.rank_at(s, d, t)]);
    }
  }
  std::vector<int> layers;
  for (const Stage& stage : was.stages) layers.push_back(stage.layers);
  return predict_shape(old, job, std::move(p), std::move(layers), why);
}

// Rule 3: each island cut again into whole stages of tp x dp ranks, for every dp up to the old
// one; the fastest that fits. Adds a line to `rejected` for each dp that does not.
std::optional<Shape> recut_stages(const Plan& old, const JobTopology& job,
                                  std::vector<std::string>& rejected) {
  const int tp = old.holmes.tp;
  // Per island, the ranks that form whole TP groups (the first tp x k of each host's ranks).
  std::vector<std::vector<int>> usable;
  for (const std::vector<int>& island : holmes_rank_order(job.topology, job.layout)) {
    usable.emplace_back();
    for (std::size_t i = 0; i < island.size();) {
      std::size_t end = i;
      const int host = job.layout.host_of_rank[island[i]];
      while (end < island.size() && job.layout.host_of_rank[island[end]] == host) ++end;
      const std::size_t whole = (end - i) / tp * tp;
      usable.back().insert(usable.back().end(), island.begin() + i, island.begin() + i + whole);
      i = end;
    }
  }
  std::optional<Shape> best;
  for (int dp = old.holmes.dp; dp >= 1; --dp) {
    const std::size_t stage_size = static_cast<std::size_t>(tp) * dp;
    std::vector<int> stages_of_island;
    int pp = 0;
    for (const auto& ranks : usable) {
      stages_of_island.push_back(static_cast<int>(ranks.size() / stage_size));
      pp += stages_of_island.back();
    }
    const std::string shape = fmt::format("tp {} x dp {}", tp, dp);
    if (pp == 0) {
      rejected.push_back(fmt::format("{}: no island has {} surviving ranks in whole TP groups",
                                     shape, stage_size));
      continue;
    }
    // More stages than layers: the last islands give up the extra ones.
    for (std::size_t i = stages_of_island.size(); pp > old.model.layers && i-- > 0;) {
      const int extra = std::min(stages_of_island[i], pp - old.model.layers);
      stages_of_island[i] -= extra;
      pp -= extra;
    }
    Placement p;
    p.name = "holmes";
    p.tp = tp;
    p.pp = pp;
    p.dp = dp;
    for (std::size_t i = 0; i < usable.size(); ++i) {
      p.grid.insert(p.grid.end(), usable[i].begin(),
                    usable[i].begin() + stages_of_island[i] * stage_size);
    }
    std::string why;
    std::optional<Shape> c = predict_shape(old, job, std::move(p), {}, why);
    if (!c) {
      rejected.push_back(fmt::format("{} x pp {}: {}", shape, pp, why));
      continue;
    }
    if (!best || c->step.step_s < best->step.step_s) best = std::move(c);
  }
  return best;
}

// For each rank of the new placement, the layers of its shard it did not hold before and the
// survivor that did (one in its own island when there is one, else the lowest rank).
std::vector<std::vector<LayerSource>> layer_sources(const Placement& was, const Placement& now,
                                                    const JobTopology& job,
                                                    const std::vector<int>& old_rank) {
  const int n = job.layout.size();
  // holders[stage * tp + t]: new ranks that held shard t of the old stage, ascending.
  std::vector<std::vector<int>> holders(static_cast<std::size_t>(was.pp) * was.tp);
  for (int r = 0; r < n; ++r) {
    const RankRole& role = was.roles[old_rank[r]];
    if (!role.spare()) holders[role.stage * was.tp + role.tp].push_back(r);
  }
  std::vector<int> old_stage_of_layer;
  for (int s = 0; s < was.pp; ++s)
    old_stage_of_layer.insert(old_stage_of_layer.end(), was.stages[s].layers, s);
  auto island_of = [&](int r) { return job.topology.hosts[job.layout.host_of_rank[r]].island; };
  std::vector<std::vector<LayerSource>> out(n);
  for (int r = 0; r < n; ++r) {
    const RankRole& role = now.roles[r];
    if (role.spare()) continue;
    const RankRole& before = was.roles[old_rank[r]];
    const Stage& stage = now.stages[role.stage];
    for (int layer = stage.first_layer; layer < stage.first_layer + stage.layers; ++layer) {
      const int s = old_stage_of_layer.at(layer);
      if (!before.spare() && before.stage == s && before.tp == role.tp) continue;
      const std::vector<int>& held = holders[s * was.tp + role.tp];
      int source = LayerSource::kLost;
      if (!held.empty()) {
        auto near = std::find_if(held.begin(), held.end(),
                                 [&](int h) { return island_of(h) == island_of(r); });
        source = near != held.end() ? *near : held.front();
      }
      auto& list = out[r];
      if (!list.empty() && list.back().source == source &&
          list.back().first_layer + list.back().layers == layer) {
        ++list.back().layers;
      } else {
        list.push_back(LayerSource{layer, 1, source});
      }
    }
  }
  return out;
}

}  // namespace

JobTopology survivors_job(const topology::Topology& topo, const JobLayout& layout,
                          const std::vector<int>& survivors) {
  JobTopology job;
  job.topology = topo;
  for (topology::Host& host : job.topology.hosts) host.gpus = 0;
  std::vector<int> hosts;
  for (int r : survivors) {
    const int h = layout.host_of_rank.at(r);
    ++job.topology.hosts[h].gpus;
    hosts.push_back(h);
  }
  job.layout = JobLayout(std::move(hosts));
  return job;
}

Replan replan(const Plan& old, const topology::Topology& topo, const JobLayout& layout,
              const std::vector<int>& survivors) {
  const int old_size = layout.size();
  require(static_cast<int>(old.holmes.roles.size()) == old_size,
          "the plan places {} ranks, the old job has {}", old.holmes.roles.size(), old_size);
  require(!survivors.empty(), "no rank survived: there is nothing to re-plan on");
  std::vector<int> new_of_old(old_size, -1);
  for (std::size_t i = 0; i < survivors.size(); ++i) {
    const int r = survivors[i];
    require(r >= 0 && r < old_size, "surviving rank {} is not a rank of the old job of {}", r,
            old_size);
    require(i == 0 || r > survivors[i - 1],
            "surviving ranks must be the old ranks in ascending order, got {} after {}", r,
            survivors[i - 1]);
    new_of_old[r] = static_cast<int>(i);
  }
  Replan out;
  out.old_rank = survivors;
  out.job = survivors_job(topo, layout, survivors);
  Plan& plan = out.plan;
  plan.model = old.model;
  plan.constraints = old.constraints;
  plan.gpu_memory_gb = old.gpu_memory_gb;

  std::vector<int> lost;
  for (int r = 0; r < old_size; ++r) {
    if (new_of_old[r] < 0) lost.push_back(r);
  }
  std::string why_not_drop;
  std::optional<Shape> chosen = drop_replicas(old, out.job, new_of_old, why_not_drop);
  std::vector<std::string> rejected;
  out.replicas_dropped = chosen.has_value();
  if (!chosen) {
    rejected.push_back("keeping the stages: " + why_not_drop);
    chosen = recut_stages(old, out.job, rejected);
  }
  if (!chosen) {
    std::string message = fmt::format(
        "'{}' no longer fits on the {} surviving ranks (of {}; lost {}):", old.model.name,
        survivors.size(), old_size, fmt::join(lost, ", "));
    for (const std::string& why : rejected) message += "\n  " + why;
    fail(HM_ERR_INVALID_ARGUMENT, "{}", message);
  }
  plan.holmes = std::move(chosen->placement);
  plan.holmes_step = chosen->step;
  const Placement& p = plan.holmes;
  int spares = 0;
  std::vector<int> active;
  for (int r = 0; r < out.job.layout.size(); ++r) {
    if (p.roles[r].spare()) {
      ++spares;
    } else {
      active.push_back(r);
    }
  }
  plan.notes.push_back(fmt::format(
      "re-planned after losing rank(s) {} of {}: {}; tp {} x pp {} x dp {} (was {} x {} x {}), "
      "{} spare rank(s), micro-batches per replica {}",
      fmt::join(lost, ", "), old_size,
      out.replicas_dropped ? "dropped the data-parallel replicas that lost a rank"
                           : "re-cut the stages",
      p.tp, p.pp, p.dp, old.holmes.tp, old.holmes.pp, old.holmes.dp, spares,
      fmt::join(p.replica_micro_batches, "/")));
  for (const std::string& why : rejected) plan.notes.push_back("rejected " + why);

  plan.naive = naive_placement(out.job.topology, out.job.layout, plan.model, p.tp, p.pp, active);
  divide_batch(plan.model, plan.naive);
  const StepModel naive_model(out.job.topology, out.job.layout, plan.model, plan.naive,
                              plan.constraints.device_tflops);
  plan.naive_step = naive_model.predict();
  out.sources = layer_sources(old.holmes, p, out.job, survivors);
  return out;
}

}  // namespace holmes::planner
