// holmes::Plan: the planner (src/planner) applied to a running job. Every rank builds the
// job's topology from the localities the ranks exchanged at wiring (plus the topology file),
// plans alike, and checks with the others that it did; the plan's groups then become
// communicators by splitting the world.
#include <holmes/holmes.hpp>

#include <cstring>

#include "communicator/communicator_impl.hpp"
#include "core/status.hpp"
#include "planner/job_topology.hpp"
#include "planner/plan_report.hpp"
#include "planner/planner.hpp"
#include "planner/replan.hpp"
#include "topology/topology_file.hpp"

namespace holmes {
namespace detail {

class PlanImpl {
 public:
  std::shared_ptr<CommunicatorImpl> world;
  planner::JobTopology job;
  planner::Plan plan;
  std::string json;
  bool naive = false;  // hm_plan_select_placement
  // A re-plan's: per rank of world, the layers it must fetch and from whom (empty otherwise).
  std::vector<std::vector<planner::LayerSource>> sources;

  const planner::Placement& selected() const { return naive ? plan.naive : plan.holmes; }
};

}  // namespace detail

namespace {

planner::ModelSpec model_from(const ModelDescription& d) {
  planner::ModelSpec m;
  if (!d.preset.empty()) {
    m = planner::model_preset(d.preset);
  } else if (!d.file.empty()) {
    m = planner::load_model(d.file);
  } else {
    fail(HM_ERR_INVALID_ARGUMENT, "the model names neither a preset nor a file");
  }
  const std::pair<int, int*> overrides[] = {{d.layers, &m.layers},
                                            {d.hidden, &m.hidden},
                                            {d.heads, &m.heads},
                                            {d.seq_len, &m.seq_len},
                                            {d.vocab, &m.vocab},
                                            {d.micro_batch, &m.micro_batch},
                                            {d.global_batch, &m.global_batch},
                                            {d.dtype_bytes, &m.dtype_bytes}};
  for (const auto& [value, field] : overrides) {
    require(value >= 0, "model fields must not be negative, got {}", value);
    if (value > 0) *field = value;
  }
  if (d.recompute) m.recompute = *d.recompute;
  if (!d.architecture.empty()) m.architecture = d.architecture;
  m.validate();
  return m;
}

// FNV-1a: the same bytes give the same 64 bits on every rank and build.
std::uint64_t fingerprint(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Every rank's {status, fingerprint} through `comm`: how ranks agree that they planned alike.
std::vector<std::uint64_t> allgather_pairs(detail::CommunicatorImpl& comm,
                                           const std::uint64_t (&mine)[2]) {
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(comm.size()));
  detail::CollectiveCall gather;
  gather.kind = CollectiveKind::kAllgather;
  gather.send = mine;
  gather.recv = all.data();
  gather.count = 2;
  gather.dtype = HM_UINT64;
  comm.collective(gather, detail::CallMode::kBlocking);
  return all;
}

}  // namespace

Plan Plan::create(const Communicator& world, const ModelDescription& description) {
  auto impl = std::make_shared<detail::PlanImpl>();
  impl->world = world.impl_;
  detail::CommunicatorImpl& comm = world.impl();
  // Plan locally, then agree: a rank whose plan differs (other model arguments, another file)
  // or that could not plan makes every rank fail, instead of a hang in the first split.
  std::optional<Error> failure;
  std::uint64_t mine[2] = {0, 0};  // {status, fingerprint}
  try {
    const planner::ModelSpec model = model_from(description);
    std::optional<topology::Topology> file;
    if (comm.topology_file()) file = topology::load_topology_file(*comm.topology_file());
    impl->job = planner::job_topology(comm.localities(), file ? &*file : nullptr);
    planner::PlanConstraints constraints;
    constraints.tp = description.tp;
    constraints.pp = description.pp;
    constraints.gpu_memory_gb = description.gpu_memory_gb;
    constraints.device_tflops = description.device_tflops;
    impl->plan = planner::make_plan(impl->job.topology, impl->job.layout, model, constraints);
    for (const std::string& note : impl->job.notes) impl->plan.notes.push_back(note);
    impl->json = planner::plan_to_json(impl->plan, impl->job.topology).dump();
    mine[1] = fingerprint(impl->json);
  } catch (const Error& e) {
    failure = e;
    mine[0] = static_cast<std::uint64_t>(e.status());
  }
  const std::vector<std::uint64_t> all = allgather_pairs(comm, mine);
  if (failure) throw *failure;
  for (int r = 0; r < comm.size(); ++r) {
    const std::uint64_t status = all[2 * r], print = all[2 * r + 1];
    if (status != 0) {
      fail(HM_ERR_MISMATCH, "rank {} could not plan ({}); see its error", r,
           status_name(static_cast<hm_status_t>(status)));
    }
    if (print != mine[1]) {
      fail(HM_ERR_MISMATCH,
           "rank {} planned differently from rank {}: every rank must describe the same model "
           "and use the same topology file",
           r, comm.rank());
    }
  }
  Plan plan;
  plan.impl_ = std::move(impl);
  return plan;
}

Plan Plan::replan(const Communicator& newworld) const {
  require(impl_ != nullptr, "the Plan is empty");
  require(newworld.valid(), "the new world communicator is empty");
  require(!impl_->naive,
          "re-planning places Holmes's placement again: select HM_PLACEMENT_HOLMES first");
  detail::CommunicatorImpl& comm = newworld.impl();
  // Which old rank each member was: the communicator keeps no link to the plan's world (a split
  // or a shrink renumbers its ranks), so every survivor states its own, with the plan it holds.
  const std::uint64_t mine[2] = {static_cast<std::uint64_t>(impl_->world->rank()),
                                 fingerprint(impl_->json)};
  const std::vector<std::uint64_t> all = allgather_pairs(comm, mine);
  const int old_size = impl_->world->size();
  require(comm.size() <= old_size,
          "the new world has {} ranks, more than the {} of the plan's world: it is not a subset",
          comm.size(), old_size);
  std::vector<int> survivors;
  for (int r = 0; r < comm.size(); ++r) {
    if (all[2 * r + 1] != mine[1]) {
      fail(HM_ERR_MISMATCH, "rank {} of the new world re-plans another plan than rank {} does", r,
           comm.rank());
    }
    const int old = static_cast<int>(all[2 * r]);
    if (!survivors.empty() && old <= survivors.back()) {
      fail(HM_ERR_INVALID_ARGUMENT,
           "the new world is not the plan's world's ranks in their order: its rank {} was rank "
           "{}, its rank {} was rank {} (shrink or split keeping the rank order)",
           r - 1, survivors.back(), r, old);
    }
    survivors.push_back(old);
    const Locality& was = impl_->world->localities().at(old);
    const Locality& now = comm.localities().at(r);
    require(was.host == now.host && was.island == now.island,
            "rank {} of the new world runs on {} ({}) but old rank {} ran on {} ({}): the new "
            "world is not made of the plan's ranks",
            r, now.host, now.island, old, was.host, was.island);
  }
  planner::Replan re =
      planner::replan(impl_->plan, impl_->job.topology, impl_->job.layout, survivors);
  nlohmann::json json = planner::plan_to_json(re.plan, re.job.topology);
  json["replan"] = planner::replan_to_json(re);
  auto impl = std::make_shared<detail::PlanImpl>();
  impl->world = newworld.impl_;
  impl->job = std::move(re.job);
  impl->plan = std::move(re.plan);
  impl->sources = std::move(re.sources);
  impl->json = json.dump();
  Plan plan;
  plan.impl_ = std::move(impl);
  return plan;
}

std::vector<LayerSource> Plan::layer_sources(int rank) const {
  require(impl_ != nullptr, "the Plan is empty");
  require(rank >= 0 && rank < impl_->world->size(), "rank {} is not in the plan's world of {}",
          rank, impl_->world->size());
  require(!impl_->naive,
          "layer sources describe Holmes's placement, and the naive one is selected");
  std::vector<LayerSource> out;
  if (impl_->sources.empty()) return out;  // not a re-plan: nothing moves
  for (const planner::LayerSource& s : impl_->sources.at(rank))
    out.push_back(LayerSource{s.first_layer, s.layers, s.source});
  return out;
}

void Plan::select(hm_placement_t placement) {
  require(impl_ != nullptr, "the Plan is empty");
  require(placement == HM_PLACEMENT_HOLMES || placement == HM_PLACEMENT_NAIVE,
          "placement is {}: expected HM_PLACEMENT_HOLMES or HM_PLACEMENT_NAIVE",
          static_cast<int>(placement));
  impl_->naive = placement == HM_PLACEMENT_NAIVE;
}

PlanRank Plan::rank() const {
  require(impl_ != nullptr, "the Plan is empty");
  const auto& p = impl_->selected();
  const auto& role = p.roles.at(static_cast<std::size_t>(impl_->world->rank()));
  if (role.spare()) return PlanRank{-1, p.pp, 0, 0, -1, p.tp, -1, p.dp, 0};
  const auto& stage = p.stages.at(static_cast<std::size_t>(role.stage));
  return PlanRank{role.stage, p.pp, stage.first_layer,          stage.layers, role.tp, p.tp,
                  role.dp,    p.dp, p.micro_batches_of(role.dp)};
}

Communicator Plan::communicator(hm_group_t group) const {
  require(impl_ != nullptr, "the Plan is empty");
  require(group == HM_GROUP_TENSOR || group == HM_GROUP_PIPELINE || group == HM_GROUP_DATA,
          "unknown group kind {}", static_cast<int>(group));
  const auto& p = impl_->selected();
  const auto& role = p.roles.at(static_cast<std::size_t>(impl_->world->rank()));
  int color = 0, key = 0;
  if (role.spare()) {
    // A spare joins the split (it is collective) and gets no communicator.
    color = HM_COLOR_UNDEFINED;
  } else {
    switch (group) {
      case HM_GROUP_TENSOR:
        color = role.stage * p.dp + role.dp;
        key = role.tp;
        break;
      case HM_GROUP_PIPELINE:
        color = role.dp * p.tp + role.tp;
        key = role.stage;
        break;
      case HM_GROUP_DATA:
        color = role.stage * p.tp + role.tp;
        key = role.dp;
        break;
      default:
        fail(HM_ERR_INVALID_ARGUMENT, "unknown group kind {}", static_cast<int>(group));
    }
  }
  auto split = impl_->world->split(color, key);
  if (!split) return Communicator();
  return Communicator(std::move(split));
}

std::string Plan::json() const {
  require(impl_ != nullptr, "the Plan is empty");
  return impl_->json;
}

double Plan::predicted_step_seconds() const {
  require(impl_ != nullptr, "the Plan is empty");
  return impl_->plan.holmes_step.step_s;
}

double Plan::naive_step_seconds() const {
  require(impl_ != nullptr, "the Plan is empty");
  return impl_->plan.naive_step.step_s;
}

}  // namespace holmes
