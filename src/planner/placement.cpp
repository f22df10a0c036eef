#include "planner/placement.hpp"

#include <algorithm>
#include <set>

#include "core/status.hpp"

namespace holmes::planner {
namespace {

using topology::Fabric;
using topology::Topology;

// Islands in the order their first host appears in the topology.
std::vector<std::string> island_order(const Topology& topo) {
  std::vector<std::string> order;
  for (const auto& host : topo.hosts) {
    if (host.gpus > 0 && std::find(order.begin(), order.end(), host.island) == order.end()) {
      order.push_back(host.island);
    }
  }
  return order;
}

bool one_rdma_island(const Topology& topo) {
  const auto order = island_order(topo);
  return order.size() == 1 && topo.islands.at(order.front()).fabric != Fabric::kEthernet;
}

std::vector<int> even_split(int layers, int pp) {
  std::vector<int> out(pp, layers / pp);
  for (int s = 0; s < layers % pp; ++s) ++out[s];
  return out;
}

// Transport and link class of a group whose members sit on `hosts`.
void describe_link(const Topology& topo, const Placement& p, const std::set<int>& hosts,
                   Group& group) {
  const auto& first = topo.hosts[*hosts.begin()];
  bool one_island = true;
  for (int h : hosts) one_island = one_island && topo.hosts[h].island == first.island;
  const topology::LinkClass* link = nullptr;
  if (hosts.size() == 1) {
    link = &topo.link_class(topo.intra_host_link);
  } else if (p.single_network && !one_rdma_island(topo)) {
    link = &topo.link_class(topo.inter_island_link);
  } else {
    // Hosts of one island use its link; hosts of several, the slow one between islands.
    link = one_island ? &topo.link_between(topo.hosts[*hosts.begin()], topo.hosts[*hosts.rbegin()])
                      : &topo.link_class(topo.inter_island_link);
  }
  group.link_class = link->name;
  group.transport = link->fabric == Fabric::kEthernet ? "tcp" : topology::fabric_name(link->fabric);
}

}  // namespace

JobLayout::JobLayout(const Topology& topo) {
  for (std::size_t h = 0; h < topo.hosts.size(); ++h) {
    host_of_rank.insert(host_of_rank.end(), topo.hosts[h].gpus, static_cast<int>(h));
  }
}

const char* group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTensor:
      return "tp";
    case GroupKind::kData:
      return "dp";
    case GroupKind::kPipeline:
      return "pp";
  }
  return "?";
}

const topology::LinkClass& placement_link(const Topology& topo, const Placement& p, int host_a,
                                          int host_b) {
  if (host_a == host_b) return topo.link_class(topo.intra_host_link);
  if (p.single_network && !one_rdma_island(topo)) return topo.link_class(topo.inter_island_link);
  return topo.link_between(topo.hosts[host_a], topo.hosts[host_b]);
}

void finish_placement(const Topology& topo, const JobLayout& layout, Placement& p) {
  const int n = p.tp * p.pp * p.dp;
  require(static_cast<int>(p.grid.size()) == n && layout.size() >= n,
          "placement of {} ranks does not match a job of {}", p.grid.size(), layout.size());
  p.roles.assign(layout.size(), RankRole{RankRole::kSpare, RankRole::kSpare, RankRole::kSpare});
  for (int r : p.grid) {
    require(r >= 0 && r < layout.size() && p.roles[r].spare(),
            "placement grid names rank {} twice or out of range", r);
    p.roles[r].stage = 0;
  }
  for (int s = 0; s < p.pp; ++s) {
    for (int d = 0; d < p.dp; ++d) {
      for (int t = 0; t < p.tp; ++t) p.roles[p.rank_at(s, d, t)] = RankRole{s, d, t};
    }
  }
  auto make_group = [&](GroupKind kind, std::vector<int> ranks) {
    Group g;
    g.kind = kind;
    std::set<int> hosts;
    for (int r : ranks) hosts.insert(layout.host_of_rank[r]);
    g.ranks = std::move(ranks);
    describe_link(topo, p, hosts, g);
    return g;
  };
  p.tp_groups.clear();
  p.dp_groups.clear();
  p.pp_groups.clear();
  for (int s = 0; s < p.pp; ++s) {
    for (int d = 0; d < p.dp; ++d) {
      std::vector<int> ranks;
      for (int t = 0; t < p.tp; ++t) ranks.push_back(p.rank_at(s, d, t));
      p.tp_groups.push_back(make_group(GroupKind::kTensor, std::move(ranks)));
    }
    for (int t = 0; t < p.tp; ++t) {
      std::vector<int> ranks;
      for (int d = 0; d < p.dp; ++d) ranks.push_back(p.rank_at(s, d, t));
      p.dp_groups.push_back(make_group(GroupKind::kData, std::move(ranks)));
    }
  }
  for (int d = 0; d < p.dp; ++d) {
    for (int t = 0; t < p.tp; ++t) {
      std::vector<int> ranks;
      for (int s = 0; s < p.pp; ++s) ranks.push_back(p.rank_at(s, d, t));
      p.pp_groups.push_back(make_group(GroupKind::kPipeline, std::move(ranks)));
    }
  }
  std::vector<int> layers;
  for (const Stage& stage : p.stages) layers.push_back(stage.layers);
  set_layers(p, layers);
  for (int s = 0; s < p.pp; ++s) {
    Stage& stage = p.stages[s];
    stage.hosts.clear();
    for (int d = 0; d < p.dp; ++d) {
      for (int t = 0; t < p.tp; ++t) {
        const int host = layout.host_of_rank[p.rank_at(s, d, t)];
        if (std::find(stage.hosts.begin(), stage.hosts.end(), host) == stage.hosts.end()) {
          stage.hosts.push_back(host);
        }
      }
    }
    std::sort(stage.hosts.begin(), stage.hosts.end());
    stage.island = topo.hosts[stage.hosts.front()].island;
    for (int h : stage.hosts) {
      if (topo.hosts[h].island != stage.island) stage.island.clear();
    }
  }
}

void set_layers(Placement& p, const std::vector<int>& layers) {
  require(layers.size() == p.stages.size(), "{} layer counts for {} stages", layers.size(),
          p.stages.size());
  int first = 0;
  for (std::size_t s = 0; s < layers.size(); ++s) {
    p.stages[s].first_layer = first;
    p.stages[s].layers = layers[s];
    first += layers[s];
  }
}

Placement naive_placement(const Topology& topo, const JobLayout& layout, const ModelSpec& model,
                          int tp, int pp) {
  std::vector<int> ranks(layout.size());
  for (int r = 0; r < layout.size(); ++r) ranks[r] = r;
  return naive_placement(topo, layout, model, tp, pp, ranks);
}

Placement naive_placement(const Topology& topo, const JobLayout& layout, const ModelSpec& model,
                          int tp, int pp, const std::vector<int>& ranks) {
  const int n = static_cast<int>(ranks.size());
  require(tp > 0 && pp > 0 && n % (tp * pp) == 0,
          "the naive placement needs tp x pp ({} x {}) to divide the {} GPUs", tp, pp, n);
  Placement p;
  p.name = "naive";
  p.tp = tp;
  p.pp = pp;
  p.dp = n / (tp * pp);
  p.single_network = true;
  p.overlap_dp = false;
  p.micro_batches = model.global_batch / (model.micro_batch * p.dp);
  // Megatron-LM: rank = (stage * dp + d) * tp + t, ranks in launch (host) order.
  p.grid = ranks;
  for (int layers : even_split(model.layers, pp)) p.stages.push_back(Stage{0, layers, {}, ""});
  finish_placement(topo, layout, p);
  return p;
}

std::string holmes_infeasibility(const Topology& topo, const JobLayout& layout, int tp, int pp) {
  const int n = layout.size();
  if (tp <= 0 || pp <= 0) return fmt::format("tp ({}) and pp ({}) must be positive", tp, pp);
  if (n % pp != 0) return fmt::format("pp {} does not divide the {} GPUs", pp, n);
  const int stage_size = n / pp;
  if (stage_size % tp != 0) {
    return fmt::format("a stage of {} GPUs (= {} / pp {}) is not a multiple of tp {}", stage_size,
                       n, pp, tp);
  }
  for (const auto& host : topo.hosts) {
    if (host.gpus % tp != 0) {
      return fmt::format(
          "host '{}' has {} GPUs, not a multiple of tp {}: tensor-parallel groups stay inside "
          "one host",
          host.name, host.gpus, tp);
    }
  }
  std::vector<std::string> islands_too_small;
  for (const std::string& island : island_order(topo)) {
    int gpus = 0;
    for (const auto& host : topo.hosts) gpus += host.island == island ? host.gpus : 0;
    if (gpus % stage_size != 0)
      islands_too_small.push_back(fmt::format("island '{}' has {} GPUs", island, gpus));
  }
  if (!islands_too_small.empty()) {
    return fmt::format(
        "{}, which do not hold whole stages of {} GPUs (tp {} x dp {}): a data-parallel group "
        "would have to span two islands",
        fmt::join(islands_too_small, " and "), stage_size, tp, stage_size / tp);
  }
  return "";
}

std::vector<std::vector<int>> holmes_rank_order(const Topology& topo, const JobLayout& layout) {
  std::vector<std::vector<int>> ranks_of_host(topo.hosts.size());
  for (int r = 0; r < layout.size(); ++r) ranks_of_host[layout.host_of_rank[r]].push_back(r);
  std::vector<std::vector<int>> order;
  for (const std::string& island : island_order(topo)) {
    order.emplace_back();
    for (std::size_t h = 0; h < topo.hosts.size(); ++h) {
      if (topo.hosts[h].island != island) continue;
      order.back().insert(order.back().end(), ranks_of_host[h].begin(), ranks_of_host[h].end());
    }
  }
  return order;
}

Placement holmes_placement(const Topology& topo, const JobLayout& layout, const ModelSpec& model,
                           int tp, int pp) {
  if (std::string why = holmes_infeasibility(topo, layout, tp, pp); !why.empty()) {
    fail(HM_ERR_INVALID_ARGUMENT, "tp {} x pp {} cannot be placed: {}", tp, pp, why);
  }
  const int n = layout.size();
  Placement p;
  p.name = "holmes";
  p.tp = tp;
  p.pp = pp;
  p.dp = n / (tp * pp);
  p.micro_batches = model.global_batch / (model.micro_batch * p.dp);
  // The launcher may have interleaved islands or hosts, the plan does not.
  std::vector<int> order;
  for (const std::vector<int>& island : holmes_rank_order(topo, layout))
    order.insert(order.end(), island.begin(), island.end());
  p.grid = std::move(order);  // stage-major, then dp, then tp: whole stages per island
  for (int layers : even_split(model.layers, pp)) p.stages.push_back(Stage{0, layers, {}, ""});
  finish_placement(topo, layout, p);
  return p;
}

}  // namespace holmes::planner
