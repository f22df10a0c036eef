#include "planner/plan_report.hpp"

#include <fmt/format.h>

#include <map>
#include <set>

namespace holmes::planner {
namespace {

using nlohmann::json;
using topology::Topology;

json prediction_json(const StepPrediction& p) {
  json stages = json::array();
  for (const StageTime& s : p.stages) {
    stages.push_back({{"forward_s", s.forward_s},
                      {"backward_s", s.backward_s},
                      {"tp_comm_s", s.tp_comm_s},
                      {"p2p_s", s.p2p_s},
                      {"per_microbatch_s", s.per_microbatch_s()},
                      {"dp_reduce_scatter_s", s.dp_reduce_scatter_s},
                      {"dp_allgather_s", s.dp_allgather_s},
                      {"dp_exposed_s", s.dp_exposed_s},
                      {"compute_s", s.compute_s},
                      {"comm_s", s.comm_s},
                      {"bubble_s", s.bubble_s},
                      {"end_s", s.end_s},
                      {"memory_gb", s.memory_gb}});
  }
  return {{"step_s", p.step_s},
          {"bubble_s", p.bubble_s},
          {"compute_s", p.compute_s},
          {"exposed_comm_s", p.exposed_comm_s},
          {"dp_exposed_s", p.dp_exposed_s},
          {"bottleneck_stage", p.bottleneck_stage},
          {"tokens_per_s", p.tokens_per_s},
          {"samples_per_s", p.samples_per_s},
          {"tflops_per_gpu", p.tflops_per_gpu},
          {"stages", stages}};
}

json groups_json(const std::vector<Group>& groups) {
  json out = json::array();
  for (const Group& g : groups) {
    out.push_back({{"ranks", g.ranks}, {"transport", g.transport}, {"link_class", g.link_class}});
  }
  return out;
}

json placement_json(const Placement& p, const StepPrediction& step, const Topology& topo) {
  json stages = json::array();
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const Stage& stage = p.stages[s];
    json hosts = json::array();
    for (int h : stage.hosts) hosts.push_back(topo.hosts[h].name);
    stages.push_back({{"stage", s},
                      {"first_layer", stage.first_layer},
                      {"layers", stage.layers},
                      {"island", stage.island},
                      {"hosts", hosts}});
  }
  json ranks = json::array();
  for (const RankRole& role : p.roles) {
    ranks.push_back({{"stage", role.stage}, {"dp", role.dp}, {"tp", role.tp}});
  }
  return {{"name", p.name},
          {"tp", p.tp},
          {"pp", p.pp},
          {"dp", p.dp},
          {"micro_batches", p.micro_batches},
          {"replica_micro_batches", p.replica_micro_batches},
          {"single_network", p.single_network},
          {"stages", stages},
          {"ranks", ranks},
          {"groups",
           {{"tp", groups_json(p.tp_groups)},
            {"dp", groups_json(p.dp_groups)},
            {"pp", groups_json(p.pp_groups)}}},
          {"prediction", prediction_json(step)}};
}

// "ib x8, tcp x4": how a kind of group is carried, counted.
std::string transports(const std::vector<Group>& groups) {
  std::map<std::string, int> count;
  for (const Group& g : groups) {
    if (g.ranks.size() > 1) ++count[g.transport + " (" + g.link_class + ")"];
  }
  if (count.empty()) return "-";
  std::string out;
  for (const auto& [name, n] : count)
    out += fmt::format("{}{} x{}", out.empty() ? "" : ", ", name, n);
  return out;
}

std::string host_list(const Stage& stage, const Topology& topo) {
  std::string out;
  const std::size_t shown = std::min<std::size_t>(stage.hosts.size(), 4);
  for (std::size_t i = 0; i < shown; ++i) {
    out += (i ? "," : "") + topo.hosts[stage.hosts[i]].name;
  }
  if (stage.hosts.size() > shown) out += fmt::format(",... ({} hosts)", stage.hosts.size());
  return out;
}

void append_placement(std::string& out, const Placement& p, const StepPrediction& step,
                      const Topology& topo) {
  out += fmt::format("{} placement: tp {} x pp {} x dp {}, {} micro-batches per step{}{}\n", p.name,
                     p.tp, p.pp, p.dp, p.micro_batches,
                     p.single_network ? "; one network for the whole job, as NCCL" : "",
                     p.overlap_dp ? "; DP overlapped with compute" : "; DP after the backward");
  out += fmt::format("  {:>5} {:>6} {:>5} {:<10} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>7}  {}\n",
                     "stage", "layers", "first", "island", "t/mb(ms)", "p2p(ms)", "compute(s)",
                     "bubble(s)", "dp(s)", "dp-exp(s)", "mem(GB)", "hosts");
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    const Stage& stage = p.stages[s];
    const StageTime& t = step.stages[s];
    out += fmt::format(
        "  {:>5} {:>6} {:>5} {:<10} {:>8.1f} {:>8.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>7.1f} "
        " {}\n",
        s, stage.layers, stage.first_layer, stage.island.empty() ? "(mixed)" : stage.island,
        t.per_microbatch_s() * 1e3, t.p2p_s * 1e3, t.compute_s, t.bubble_s,
        t.dp_reduce_scatter_s + t.dp_allgather_s, t.dp_exposed_s, t.memory_gb,
        host_list(stage, topo));
  }
  out += fmt::format("  groups: tp {} | dp {} | pp {}\n", transports(p.tp_groups),
                     transports(p.dp_groups), transports(p.pp_groups));
  out += fmt::format(
      "  predicted step {:.3f} s = compute {:.3f} + bubble {:.3f} + exposed comm {:.3f}; "
      "{:.0f} tokens/s, {:.2f} samples/s, {:.1f} TFLOPS/GPU\n",
      step.step_s, step.compute_s, step.bubble_s, step.exposed_comm_s, step.tokens_per_s,
      step.samples_per_s, step.tflops_per_gpu);
}

}  // namespace

nlohmann::json plan_to_json(const Plan& plan, const Topology& topo) {
  const ModelSpec& m = plan.model;
  return {{"model",
           {{"name", m.name},
            {"layers", m.layers},
            {"hidden", m.hidden},
            {"heads", m.heads},
            {"seq_len", m.seq_len},
            {"vocab", m.vocab},
            {"micro_batch", m.micro_batch},
            {"global_batch", m.global_batch},
            {"dtype_bytes", m.dtype_bytes},
            {"recompute", m.recompute}}},
          {"gpus", plan.holmes.tp * plan.holmes.pp * plan.holmes.dp},
          {"gpu_memory_gb", plan.gpu_memory_gb},
          {"holmes", placement_json(plan.holmes, plan.holmes_step, topo)},
          {"naive", placement_json(plan.naive, plan.naive_step, topo)},
          {"speedup", plan.speedup()},
          {"notes", plan.notes}};
}

nlohmann::json replan_to_json(const Replan& replan) {
  json sources = json::array();
  for (const auto& list : replan.sources) {
    json ranges = json::array();
    for (const LayerSource& s : list) {
      ranges.push_back(
          {{"first_layer", s.first_layer}, {"layers", s.layers}, {"source", s.source}});
    }
    sources.push_back(ranges);
  }
  return {{"old_rank", replan.old_rank},
          {"rule", replan.replicas_dropped ? "dropped replicas" : "re-cut stages"},
          {"layer_sources", sources}};
}

std::string plan_to_table(const Plan& plan, const Topology& topo) {
  std::string out = fmt::format(
      "model {}: {} layers, hidden {}, {} heads, seq {}, micro-batch {}, global batch {}\n",
      plan.model.name, plan.model.layers, plan.model.hidden, plan.model.heads, plan.model.seq_len,
      plan.model.micro_batch, plan.model.global_batch);
  append_placement(out, plan.holmes, plan.holmes_step, topo);
  append_placement(out, plan.naive, plan.naive_step, topo);
  out += fmt::format("predicted speedup of holmes over naive: {:.2f}x\n", plan.speedup());
  for (const std::string& note : plan.notes) out += "note: " + note + "\n";
  return out;
}

std::string plan_to_dot(const Plan& plan, const Topology& topo) {
  const Placement& p = plan.holmes;
  std::string out = "graph holmes_plan {\n  compound=true; node [shape=box];\n";
  // Islands contain hosts; each host node lists the stages it runs.
  std::map<std::string, std::vector<int>> hosts_of_island;
  for (std::size_t h = 0; h < topo.hosts.size(); ++h) {
    hosts_of_island[topo.hosts[h].island].push_back(static_cast<int>(h));
  }
  std::map<int, std::set<int>> stages_of_host;
  for (std::size_t s = 0; s < p.stages.size(); ++s) {
    for (int h : p.stages[s].hosts) stages_of_host[h].insert(static_cast<int>(s));
  }
  int cluster = 0;
  for (const auto& [island, hosts] : hosts_of_island) {
    const auto& is = topo.islands.at(island);
    out += fmt::format("  subgraph cluster_{} {{\n    label=\"island {} ({}, {})\";\n", cluster++,
                       island, topology::fabric_name(is.fabric), is.link_class);
    for (int h : hosts) {
      std::string stages;
      for (int s : stages_of_host[h]) stages += fmt::format("{}{}", stages.empty() ? "" : ",", s);
      out += fmt::format("    h{} [label=\"{}\\n{} GPUs\\nstage {}\"];\n", h, topo.hosts[h].name,
                         topo.hosts[h].gpus, stages.empty() ? "-" : stages);
    }
    out += "  }\n";
  }
  // Stage boundaries: an edge per pair of consecutive stages, labelled with its link.
  for (std::size_t s = 0; s + 1 < p.stages.size(); ++s) {
    const int a = p.stages[s].hosts.front();
    const int b = p.stages[s + 1].hosts.front();
    const auto& link = placement_link(topo, p, a, b);
    out += fmt::format("  h{} -- h{} [label=\"pp {}->{} ({})\", style={}];\n", a, b, s, s + 1,
                       link.name, link.fabric == topology::Fabric::kEthernet ? "dashed" : "bold");
  }
  out += "}\n";
  return out;
}

}  // namespace holmes::planner
