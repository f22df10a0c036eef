// The Python extension module holmes._holmes_torch: the creator torch.distributed calls for
// backend "holmes" (registered by holmes/torch.py), and what holmes.torch needs of a group
// (the planner over its communicator, the transport of each peer).
#include <holmes/holmes.hpp>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <map>
#include <string>

#include "process_group_holmes.hpp"

namespace py = pybind11;

namespace holmes::torch_backend {
namespace {

// The Holmes backend behind a Python ProcessGroup, or a TypeError naming what it is instead.
ProcessGroupHolmes& holmes_group(const py::object& group) {
#if TORCH_VERSION_MAJOR >= 2
  auto pg = group.cast<c10::intrusive_ptr<c10d::ProcessGroup>>();
  c10::intrusive_ptr<c10d::Backend> backend;
  try {
    backend = pg->getBackend(c10::DeviceType::CPU);
  } catch (const std::exception&) {
  }
  auto* holmes = dynamic_cast<ProcessGroupHolmes*>(backend.get());
  const std::string name = pg->getBackendName();
#else
  auto pg = group.cast<c10::intrusive_ptr<c10d::ProcessGroup>>();
  auto* holmes = dynamic_cast<ProcessGroupHolmes*>(pg.get());
  const std::string name = pg->getBackendName();
#endif
  if (holmes == nullptr) {
    throw py::type_error("expected a process group of backend 'holmes', got one of '" + name + "'");
  }
  return *holmes;
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

// Collective over the group: the plan, and where this rank sits in it (for each placement).
py::dict plan(const py::object& group, const py::dict& fields, bool naive) {
  auto& pg = holmes_group(group);
  const ModelDescription model = model_from(fields);
  py::dict out;
  {
    py::gil_scoped_release release;
    try {
      Plan p = Plan::create(pg.communicator(), model);
      if (naive) p.select(HM_PLACEMENT_NAIVE);
      const PlanRank r = p.rank();
      py::gil_scoped_acquire acquire;
      out["stage"] = r.stage;
      out["num_stages"] = r.num_stages;
      out["first_layer"] = r.first_layer;
      out["num_layers"] = r.num_layers;
      out["tp_rank"] = r.tp_rank;
      out["tp_size"] = r.tp_size;
      out["dp_rank"] = r.dp_rank;
      out["dp_size"] = r.dp_size;
      out["micro_batches"] = r.micro_batches;
      out["json"] = p.json();
      out["predicted_step_seconds"] = p.predicted_step_seconds();
      out["naive_step_seconds"] = p.naive_step_seconds();
    } catch (const Error& e) {
      py::gil_scoped_acquire acquire;
      throw std::runtime_error(std::string("holmes backend: planning failed (") +
                               hm_status_string(e.status()) + "): " + e.what());
    }
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
  c10::intrusive_ptr<BackendBase> survivors =
      c10::make_intrusive<ProcessGroupHolmes>(std::move(shrunk), pg.timeout());
  return py::cast(survivors);
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
  m.def("create_backend", &create_process_group_holmes, py::arg("store"), py::arg("rank"),
        py::arg("size"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>(),
        "The creator torch.distributed calls: (store, rank, world_size, timeout)");
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
