// The Python extension module holmes._holmes_torch: the creator torch.distributed calls for
// backend "holmes" (registered by holmes/torch.py), and what holmes.torch needs of a group
// (the planner over its communicator, the transport of each peer).
#include <holmes/holmes.hpp>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "process_group_holmes.hpp"

namespace py = pybind11;

namespace holmes::torch_backend {
namespace {

// The Holmes backend behind a Python group, or a TypeError naming what it is instead. A group is
// a ProcessGroup torch made (init_process_group, new_group; in torch 2.x its CPU backend is ours)
// or, in torch 2.x, a Backend this module made (shrink_group, a plan's groups: as_python).
ProcessGroupHolmes& holmes_group(const py::object& group) {
  ProcessGroupHolmes* holmes = nullptr;
  std::string name;
#if TORCH_VERSION_MAJOR >= 2
  if (py::isinstance<c10d::Backend>(group)) {
    auto backend = group.cast<c10::intrusive_ptr<c10d::Backend>>();
    holmes = dynamic_cast<ProcessGroupHolmes*>(backend.get());
    name = backend->getBackendName();
  } else if (py::isinstance<c10d::ProcessGroup>(group)) {
    auto pg = group.cast<c10::intrusive_ptr<c10d::ProcessGroup>>();
    c10::intrusive_ptr<c10d::Backend> backend;
    try {
      backend = pg->getBackend(c10::DeviceType::CPU);
    } catch (const std::exception&) {
      // No CPU backend: not ours, named below.
    }
    holmes = dynamic_cast<ProcessGroupHolmes*>(backend.get());
    name = pg->getBackendName();
  }
#else
  if (py::isinstance<c10d::ProcessGroup>(group)) {
    auto pg = group.cast<c10::intrusive_ptr<c10d::ProcessGroup>>();
    holmes = dynamic_cast<ProcessGroupHolmes*>(pg.get());
    name = pg->getBackendName();
  }
#endif
  if (holmes == nullptr && name.empty()) {
    throw py::type_error("expected a process group of backend 'holmes', got a " +
                         py::str(py::type::of(group).attr("__name__")).cast<std::string>());
  }
  if (holmes == nullptr) {
    throw py::type_error("expected a process group of backend 'holmes', got one of '" + name + "'");
  }
  return *holmes;
}

// A group this module made, for Python: torch 1.x takes it as a ProcessGroup (group= of the
// dist.* collectives); torch 2.x as our own Backend class (bound below), whose methods work
// whatever torch 2.x binds on Backend itself (its first releases bind no collectives there).
py::object as_python(c10::intrusive_ptr<ProcessGroupHolmes> group) {
#if TORCH_VERSION_MAJOR >= 2
  return py::cast(std::move(group));
#else
  return py::cast(c10::intrusive_ptr<BackendBase>(std::move(group)));
#endif
}

ModelDescription model_from(const py::dict& fields) {
  ModelDescription m;
  static const std::map<std::string, int ModelDescription::*> ints = {
      {"layers", &ModelDescription::layers},
      {"hidden", &ModelDescription::hidden},
      {"heads", &ModelDescription::heads},
      {"seq_len", &ModelDescription::seq_len},
      {"vocab", &ModelDescription::vocab},
      {"micro_batch", &ModelDescription::micro_batch},
      {"global_batch", &ModelDescription::global_batch},
      {"dtype_bytes", &ModelDescription::dtype_bytes},
      {"tp", &ModelDescription::tp},
      {"pp", &ModelDescription::pp}};
  static const std::map<std::string, std::string ModelDescription::*> strings = {
      {"preset", &ModelDescription::preset},
      {"file", &ModelDescription::file},
      {"architecture", &ModelDescription::architecture}};
  static const std::map<std::string, double ModelDescription::*> doubles = {
      {"gpu_memory_gb", &ModelDescription::gpu_memory_gb},
      {"device_tflops", &ModelDescription::device_tflops}};
  for (const auto& [key_handle, value] : fields) {
    const auto key = key_handle.cast<std::string>();
    if (auto i = ints.find(key); i != ints.end()) {
      m.*(i->second) = value.cast<int>();
    } else if (auto s = strings.find(key); s != strings.end()) {
      m.*(s->second) = py::str(value).cast<std::string>();
    } else if (auto d = doubles.find(key); d != doubles.end()) {
      m.*(d->second) = value.cast<double>();
    } else if (key == "recompute") {
      if (!value.is_none()) m.recompute = value.cast<bool>();
    } else {
      std::string known = "recompute";
      for (const auto& [name, _] : ints) known += ", " + name;
      for (const auto& [name, _] : strings) known += ", " + name;
      for (const auto& [name, _] : doubles) known += ", " + name;
      throw py::type_error("unknown model field '" + key + "' (known: " + known + ")");
    }
  }
  if (m.preset.empty() && m.file.empty()) {
    throw py::value_error("give a model preset= (e.g. 'gpt-7.5b', 'mlp') or file=");
  }
  return m;
}

// A plan of a holmes group, with that group (its communicator is the plan's world: the plan's
// groups are splits of it) and every rank's place in it.
struct PlanHandle {
  Plan plan;
  py::object world;
  std::vector<std::array<int, 3>> roles;  // per rank of the world: stage, tp rank, dp rank
};

std::runtime_error planning_failed(const char* what, const Error& e) {
  return std::runtime_error(std::string("holmes backend: ") + what + " failed (" +
                            hm_status_string(e.status()) + "): " + e.what());
}

// Collective over the plan's world (GIL released): every rank's stage, tp and dp rank.
std::vector<std::array<int, 3>> gather_roles(Communicator& world, const PlanRank& r) {
  const std::array<std::int32_t, 3> mine = {r.stage, r.tp_rank, r.dp_rank};
  std::vector<std::int32_t> all(3 * static_cast<std::size_t>(world.size()));
  world.allgather(mine.data(), all.data(), 3, HM_INT32);
  std::vector<std::array<int, 3>> roles;
  for (std::size_t i = 0; i < all.size(); i += 3) roles.push_back({all[i], all[i + 1], all[i + 2]});
  return roles;
}

// Collective over the group: the plan (Holmes's placement, or the naive one it compares with).
std::shared_ptr<PlanHandle> plan(const py::object& group, const py::dict& fields, bool naive) {
  auto& pg = holmes_group(group);
  const ModelDescription model = model_from(fields);
  auto handle = std::make_shared<PlanHandle>();
  handle->world = group;
  py::gil_scoped_release release;
  try {
    handle->plan = Plan::create(pg.communicator(), model);
    if (naive) handle->plan.select(HM_PLACEMENT_NAIVE);
    handle->roles = gather_roles(pg.communicator(), handle->plan.rank());
  } catch (const Error& e) {
    py::gil_scoped_acquire acquire;
    throw planning_failed("planning", e);
  }
  return handle;
}

// Where this rank sits in the plan, the plan itself (JSON) and every rank's role.
py::dict plan_info(const PlanHandle& h) {
  const PlanRank r = h.plan.rank();
  py::dict out;
  out["stage"] = r.stage;
  out["num_stages"] = r.num_stages;
  out["first_layer"] = r.first_layer;
  out["num_layers"] = r.num_layers;
  out["tp_rank"] = r.tp_rank;
  out["tp_size"] = r.tp_size;
  out["dp_rank"] = r.dp_rank;
  out["dp_size"] = r.dp_size;
  out["micro_batches"] = r.micro_batches;
  out["json"] = h.plan.json();
  out["predicted_step_seconds"] = h.plan.predicted_step_seconds();
  out["naive_step_seconds"] = h.plan.naive_step_seconds();
  py::list roles;
  for (const auto& [stage, tp, dp] : h.roles) roles.append(py::make_tuple(stage, tp, dp));
  out["roles"] = roles;
  return out;
}

// Collective over `survivors` (a holmes group of the plan's world's survivors in its order): the
// same model placed on them (hm_plan_replan).
std::shared_ptr<PlanHandle> replan(const PlanHandle& h, const py::object& survivors) {
  auto& pg = holmes_group(survivors);
  auto handle = std::make_shared<PlanHandle>();
  handle->world = survivors;
  py::gil_scoped_release release;
  try {
    handle->plan = h.plan.replan(pg.communicator());
    handle->roles = gather_roles(pg.communicator(), handle->plan.rank());
  } catch (const Error& e) {
    py::gil_scoped_acquire acquire;
    throw planning_failed("re-planning", e);
  }
  return handle;
}

// Collective over the plan's world: this rank's group of a kind as a holmes process group (not
// registered with torch), or None for a re-plan's spare.
py::object plan_group(const PlanHandle& h, const std::string& kind) {
  static const std::map<std::string, hm_group_t> kinds = {
      {"tensor", HM_GROUP_TENSOR}, {"pipeline", HM_GROUP_PIPELINE}, {"data", HM_GROUP_DATA}};
  const auto it = kinds.find(kind);
  if (it == kinds.end()) {
    throw py::value_error("unknown group kind '" + kind + "' (tensor, pipeline or data)");
  }
  auto& world = holmes_group(h.world);
  Communicator comm;
  {
    py::gil_scoped_release release;
    try {
      comm = h.plan.communicator(it->second);
    } catch (const Error& e) {
      py::gil_scoped_acquire acquire;
      throw planning_failed("making the plan's groups", e);
    }
  }
  if (!comm.valid()) return py::none();
  return as_python(c10::make_intrusive<ProcessGroupHolmes>(std::move(comm), world.timeout()));
}

// The layers `rank` of the plan's world fetches after a re-plan: (first, count, source rank).
py::list layer_sources(const PlanHandle& h, int rank) {
  py::list out;
  try {
    for (const auto& s : h.plan.layer_sources(rank)) {
      out.append(py::make_tuple(s.first_layer, s.num_layers, s.rank));
    }
  } catch (const Error& e) {
    throw py::value_error(std::string("holmes backend: layer_sources: ") + e.what());
  }
  return out;
}

void revoke_group(const py::object& group) { holmes_group(group).communicator().revoke(); }

// Collective over the group's survivors: a process group of them (hm_comm_shrink), in the
// group's rank order, with the group's timeout. torch 1.x: a ProcessGroup, usable as group= of
// the dist.* collectives; torch 2.x: the backend, whose methods take the collectives.
py::object shrink_group(const py::object& group, const std::vector<int>& exclude, bool failed) {
  auto& pg = holmes_group(group);
  Communicator shrunk;
  {
    py::gil_scoped_release release;
    try {
      shrunk = pg.communicator().shrink(exclude, failed ? HM_SHRINK_FAILED : HM_SHRINK_DEFAULT);
    } catch (const Error& e) {
      py::gil_scoped_acquire acquire;
      throw std::runtime_error(std::string("holmes backend: shrink failed (") +
                               hm_status_string(e.status()) + "): " + e.what());
    }
  }
  return as_python(c10::make_intrusive<ProcessGroupHolmes>(std::move(shrunk), pg.timeout()));
}

py::list peer_transports(const py::object& group) {
  auto& comm = holmes_group(group).communicator();
  py::list out;
  for (int peer = 0; peer < comm.size(); ++peer) {
    const PeerTransport t = comm.peer_transport(peer);
    out.append(py::make_tuple(t.transport, t.reason, t.link));
  }
  return out;
}

}  // namespace
}  // namespace holmes::torch_backend

PYBIND11_MODULE(_holmes_torch, m) {
  using namespace holmes::torch_backend;
  m.doc() = "The torch.distributed backend 'holmes' (import holmes.torch registers it)";
#if TORCH_VERSION_MAJOR >= 2
  // What Python calls on the groups this module makes (as_python), bound on our own class so
  // that they do not depend on what a torch 2.x release binds on Backend.
  py::class_<ProcessGroupHolmes, c10d::Backend, c10::intrusive_ptr<ProcessGroupHolmes>>(
      m, "ProcessGroupHolmes", "A holmes group that torch did not make (shrink_group, replan)")
      .def("rank", &ProcessGroupHolmes::getRank)
      .def("size", &ProcessGroupHolmes::getSize)
      .def(
          "allreduce",
          [](ProcessGroupHolmes& g, std::vector<at::Tensor> tensors,
             const c10d::AllreduceOptions& opts) { return g.allreduce(tensors, opts); },
          py::arg("tensors"), py::arg("opts") = c10d::AllreduceOptions(),
          py::call_guard<py::gil_scoped_release>())
      .def(
          "broadcast",
          [](ProcessGroupHolmes& g, std::vector<at::Tensor> tensors,
             const c10d::BroadcastOptions& opts) { return g.broadcast(tensors, opts); },
          py::arg("tensors"), py::arg("opts") = c10d::BroadcastOptions(),
          py::call_guard<py::gil_scoped_release>())
      .def(
          "allgather",
          [](ProcessGroupHolmes& g, std::vector<std::vector<at::Tensor>> outputs,
             std::vector<at::Tensor> inputs,
             const c10d::AllgatherOptions& opts) { return g.allgather(outputs, inputs, opts); },
          py::arg("output_tensors"), py::arg("input_tensors"),
          py::arg("opts") = c10d::AllgatherOptions(), py::call_guard<py::gil_scoped_release>())
      .def(
          "send",
          [](ProcessGroupHolmes& g, std::vector<at::Tensor> tensors, int dst, int tag) {
            return g.send(tensors, dst, tag);
          },
          py::arg("tensors"), py::arg("dstRank"), py::arg("tag"),
          py::call_guard<py::gil_scoped_release>())
      .def(
          "recv",
          [](ProcessGroupHolmes& g, std::vector<at::Tensor> tensors, int src, int tag) {
            return g.recv(tensors, src, tag);
          },
          py::arg("tensors"), py::arg("srcRank"), py::arg("tag"),
          py::call_guard<py::gil_scoped_release>())
      .def(
          "barrier",
          [](ProcessGroupHolmes& g, const c10d::BarrierOptions& opts) { return g.barrier(opts); },
          py::arg("opts") = c10d::BarrierOptions(), py::call_guard<py::gil_scoped_release>());
#endif
  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::duration<float> timeout) {
        c10::intrusive_ptr<ProcessGroupHolmes> group;
        {
          py::gil_scoped_release release;
          group = create_process_group_holmes(store, rank, size, timeout);
        }
        return as_python(std::move(group));
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      "The creator torch.distributed calls: (store, rank, world_size, timeout)");
  py::class_<PlanHandle, std::shared_ptr<PlanHandle>>(m, "Plan",
                                                      "A plan of a holmes group (holmes.torch)")
      .def("info", &plan_info, "this rank's place, the plan as JSON, every rank's role")
      .def("replan", &replan, py::arg("survivors"),
           "Collective over the survivors' holmes group: the model placed on them")
      .def("group", &plan_group, py::arg("kind"),
           "Collective over the plan's world: this rank's group of a kind (None: a spare)")
      .def("layer_sources", &layer_sources, py::arg("rank"),
           "After a re-plan: (first layer, count, source rank) that `rank` fetches");
  m.def("plan", &plan, py::arg("group"), py::arg("model"), py::arg("naive") = false,
        "Collective over a holmes group: the planner's placement of a model on it");
  m.def("revoke", &revoke_group, py::arg("group"),
        "hm_comm_revoke on a holmes group: its calls here and at every peer end at once");
  m.def("shrink", &shrink_group, py::arg("group"), py::arg("exclude"), py::arg("failed"),
        "Collective over a holmes group's survivors: a group of them (hm_comm_shrink)");
  m.def("peer_transports", &peer_transports, py::arg("group"),
        "(transport, reason, link) for each rank of a holmes group");
  m.attr("torch_version_major") = TORCH_VERSION_MAJOR;
  m.attr("max_user_tag") = kMaxUserTag;
}
