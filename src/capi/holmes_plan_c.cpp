// The planner's C API (holmes.h, "Planner") over holmes::Plan.
#include <cstddef>
#include <cstring>

#include "capi/capi_support.hpp"

struct hm_plan {
  holmes::Plan plan;
};

namespace {

using holmes::capi::comm_of;
using holmes::capi::guarded;
using holmes::capi::require_out;

holmes::ModelDescription model_from_c(const hm_model_t* m) {
  holmes::require(m != nullptr, "model is NULL");
  holmes::require(
      m->size >= offsetof(hm_model_t, gpu_memory_gb) + sizeof(double) && m->size <= (1u << 16),
      "hm_model_t.size is {}: initialize the model with HM_MODEL_INITIALIZER", m->size);
  holmes::require((m->preset != nullptr) != (m->file != nullptr),
                  "the model must name exactly one of preset and file");
  holmes::ModelDescription d;
  if (m->preset) d.preset = m->preset;
  if (m->file) d.file = m->file;
  d.layers = m->layers;
  d.hidden = m->hidden;
  d.heads = m->heads;
  d.seq_len = m->seq_len;
  d.vocab = m->vocab;
  d.micro_batch = m->micro_batch;
  d.global_batch = m->global_batch;
  d.dtype_bytes = m->dtype_bytes;
  holmes::require(m->recompute >= -1 && m->recompute <= 1,
                  "model recompute is {}: expected 1, 0 or -1 (the preset's)", m->recompute);
  if (m->recompute != -1) d.recompute = m->recompute == 1;
  holmes::require(m->tp >= 0 && m->pp >= 0, "model tp ({}) and pp ({}) must not be negative", m->tp,
                  m->pp);
  d.tp = m->tp;
  d.pp = m->pp;
  holmes::require(m->gpu_memory_gb >= 0, "model gpu_memory_gb ({}) must not be negative",
                  m->gpu_memory_gb);
  d.gpu_memory_gb = m->gpu_memory_gb;
  // Fields added after the first release are read only when the caller's struct has them.
  if (m->size >= offsetof(hm_model_t, architecture) + sizeof(m->architecture) &&
      m->architecture != nullptr) {
    d.architecture = m->architecture;
  }
  if (m->size >= offsetof(hm_model_t, device_tflops) + sizeof(m->device_tflops)) {
    holmes::require(m->device_tflops >= 0, "model device_tflops ({}) must not be negative",
                    m->device_tflops);
    d.device_tflops = m->device_tflops;
  }
  return d;
}

holmes::Plan& plan_of(hm_plan_t plan) {
  holmes::require(plan != nullptr, "plan is NULL");
  return plan->plan;
}

}  // namespace

extern "C" {

hm_status_t hm_plan_create(hm_comm_t world, const hm_model_t* model, hm_plan_t* plan) {
  return guarded("hm_plan_create", [&] {
    require_out(plan, "plan");
    *plan = nullptr;
    auto& comm = comm_of(world);
    const holmes::ModelDescription description = model_from_c(model);
    *plan = new hm_plan{holmes::Plan::create(comm, description)};
  });
}

hm_status_t hm_plan_destroy(hm_plan_t plan) {
  return guarded("hm_plan_destroy", [&] {
    holmes::require(plan != nullptr, "plan is NULL");
    delete plan;
  });
}

hm_status_t hm_plan_get_rank(hm_plan_t plan, hm_plan_rank_t* rank) {
  return guarded("hm_plan_get_rank", [&] {
    require_out(rank, "rank");
    const holmes::PlanRank r = plan_of(plan).rank();
    *rank = hm_plan_rank_t{r.stage,   r.num_stages, r.first_layer, r.num_layers,   r.tp_rank,
                           r.tp_size, r.dp_rank,    r.dp_size,     r.micro_batches};
  });
}

hm_status_t hm_plan_comm_create(hm_plan_t plan, hm_group_t group, hm_comm_t* comm) {
  return guarded("hm_plan_comm_create", [&] {
    require_out(comm, "comm");
    *comm = nullptr;
    holmes::require(
        group == HM_GROUP_TENSOR || group == HM_GROUP_PIPELINE || group == HM_GROUP_DATA,
        "group is {}: expected HM_GROUP_TENSOR, HM_GROUP_PIPELINE or HM_GROUP_DATA",
        static_cast<int>(group));
    holmes::Communicator made = plan_of(plan).communicator(group);
    if (made.valid()) *comm = new hm_comm(std::move(made));
  });
}

hm_status_t hm_plan_get_json(hm_plan_t plan, char* buffer, size_t capacity, size_t* length) {
  return guarded("hm_plan_get_json", [&] {
    holmes::capi::copy_out(plan_of(plan).json(), buffer, capacity, length, "the plan");
  });
}

hm_status_t hm_plan_select_placement(hm_plan_t plan, hm_placement_t placement) {
  return guarded("hm_plan_select_placement", [&] { plan_of(plan).select(placement); });
}

hm_status_t hm_plan_get_prediction(hm_plan_t plan, double* step_seconds,
                                   double* naive_step_seconds) {
  return guarded("hm_plan_get_prediction", [&] {
    const holmes::Plan& p = plan_of(plan);
    if (step_seconds != nullptr) *step_seconds = p.predicted_step_seconds();
    if (naive_step_seconds != nullptr) *naive_step_seconds = p.naive_step_seconds();
  });
}

hm_status_t hm_plan_replan(hm_plan_t plan, hm_comm_t newworld, hm_plan_t* newplan) {
  return guarded("hm_plan_replan", [&] {
    require_out(newplan, "newplan");
    *newplan = nullptr;
    const holmes::Plan& old = plan_of(plan);
    *newplan = new hm_plan{old.replan(comm_of(newworld))};
  });
}

hm_status_t hm_plan_get_layer_sources(hm_plan_t plan, int rank, hm_layer_source_t* sources,
                                      size_t capacity, size_t* count) {
  return guarded("hm_plan_get_layer_sources", [&] {
    require_out(count, "count");
    holmes::require(sources != nullptr || capacity == 0, "sources is NULL with capacity {}",
                    capacity);
    const std::vector<holmes::LayerSource> list = plan_of(plan).layer_sources(rank);
    *count = list.size();
    for (std::size_t i = 0; i < list.size() && i < capacity; ++i)
      sources[i] = hm_layer_source_t{list[i].first_layer, list[i].num_layers, list[i].rank};
  });
}

}  // extern "C"
