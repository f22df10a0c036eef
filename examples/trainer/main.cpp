// holmes-trainer: a small pipeline + data-parallel trainer that links Holmes the way a custom
// trainer would. A stack of dense layers (dense.hpp) learns a linear map from synthetic data
// (sample k is the same on every rank; its target is A x_k for a fixed random A). The planner
// chooses the pipeline stages, the data-parallel groups and each stage's layers
// (hm_plan_create); activations and their gradients go between stages with hm_isend/hm_recv
// in the 1F1B order; gradients are summed over the data-parallel group with hm_allreduce.
//
//   holmes-trainer --reference --losses-out ref.txt          one process, no Holmes
//   holmes-run -n 8 -- holmes-trainer --compare-with ref.txt [--placement naive]
//   holmes-run -n 8 --elastic -- holmes-trainer --compare-with ref.txt --kill-rank 5
//       --kill-step 10 --kill-stamp /tmp/kill                   survive losing a rank
//
// With --kill-rank the rank kills itself (SIGKILL) in the middle of --kill-step, after its first
// forward. The others fail their blocked calls, revoke their communicators (so none waits for
// the timeout), shrink the world to the survivors (hm_comm_shrink, HM_SHRINK_FAILED), re-plan
// the model on them (hm_plan_replan: the same global batch, more micro-batches per replica),
// copy the weights of the layers they now hold from the survivors that held them
// (hm_plan_get_layer_sources), and run the interrupted step again. No rank applied that step's
// update (every data-parallel group has a member in the lost replica, which never reached its
// allreduce), so the losses of every step still equal the single-process run's.
//
// The single-process reference runs the same samples in the same micro-batches, so both end
// every step with the same loss up to float32 rounding (the data-parallel sum adds in another
// order): --compare-with checks every step within --tolerance (relative, default 1e-3).
#include <holmes/holmes.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "dense.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int layers = 8;
  int width = 128;
  int micro_batch = 16;
  int global_batch = 256;
  int steps = 30;
  int pp = 0;  // 0: the planner chooses
  float learning_rate = 0.1f;
  std::string placement = "holmes";
  bool reference = false;
  std::string losses_out;
  std::string compare_with;
  double tolerance = 1e-3;
  std::string summary_out;
  bool quiet = false;
  int kill_rank = -1;  // this rank SIGKILLs itself in the middle of kill_step
  int kill_step = -1;
  std::string kill_stamp;  // where the victim writes the time of its death (ms since the epoch)
};

constexpr std::uint64_t kDataSeed = 11;
constexpr std::uint64_t kTeacherSeed = 13;
constexpr std::uint64_t kLayerSeed = 1000;

// Sample k: x_k (width values) and its target A x_k.
void make_sample(int width, std::uint64_t k, float* x, float* target) {
  for (int i = 0; i < width; ++i) x[i] = trainer::uniform(kDataSeed, k * width + i);
  const float scale = 1.0f / std::sqrt(static_cast<float>(width));
  for (int o = 0; o < width; ++o) {
    float t = 0;
    for (int i = 0; i < width; ++i) t += trainer::uniform(kTeacherSeed, o * width + i) * x[i];
    target[o] = scale * t;
  }
}

// A failed Holmes call; a recovery starts from the failures a lost rank causes.
struct CallFailed : std::runtime_error {
  hm_status_t status;
  CallFailed(hm_status_t s, const std::string& what) : std::runtime_error(what), status(s) {}
  bool lost_a_rank() const {
    return status == HM_ERR_PEER_FAILED || status == HM_ERR_TIMEOUT || status == HM_ERR_ABORTED;
  }
};

void check(hm_status_t status, const char* what) {
  if (status != HM_SUCCESS) {
    throw CallFailed(status, fmt::format("{}: {} ({})", what, hm_last_error_message(),
                                         hm_status_string(status)));
  }
}

double epoch_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The layers [first, first + count) of the model, and the activations of micro-batches in
// flight (1F1B keeps up to pp of them).
struct Stage {
  int first = 0;
  std::vector<trainer::DenseLayer> layers;
  int width = 0;
  // acts[mb][j]: input of local layer j (j = layers.size(): the stage's output).
  std::map<int, std::vector<std::vector<float>>> acts;

  Stage(const Options& o, int first_layer, int count) : first(first_layer), width(o.width) {
    for (int l = first_layer; l < first_layer + count; ++l) {
      layers.emplace_back(o.width, l == o.layers - 1, kLayerSeed + l);
    }
  }
  void forward(int mb, std::vector<float> input, int rows) {
    auto& a = acts[mb];
    a.clear();
    a.push_back(std::move(input));
    for (auto& layer : layers) {
      std::vector<float> out(a.back().size());
      layer.forward(a.back(), out, rows);
      a.push_back(std::move(out));
    }
  }
  const std::vector<float>& output(int mb) { return acts[mb].back(); }
  // Returns d(loss)/d(stage input) (empty when `want_input_grad` is false).
  std::vector<float> backward(int mb, std::vector<float> d_out, int rows, bool want_input_grad) {
    auto& a = acts[mb];
    for (int j = static_cast<int>(layers.size()) - 1; j >= 0; --j) {
      std::vector<float> d_in;
      if (j > 0 || want_input_grad) d_in.resize(a[j].size());
      layers[j].backward(a[j], a[j + 1], d_out, d_in, rows);
      d_out = std::move(d_in);
    }
    acts.erase(mb);
    return d_out;
  }
  std::size_t parameter_count() const {
    std::size_t n = 0;
    for (const auto& l : layers) n += l.parameters().size();
    return n;
  }
};

// Loss of a micro-batch at the model's output, and d(loss)/d(output); sums over samples.
double loss_and_grad(const std::vector<float>& y, const std::vector<float>& target,
                     std::vector<float>& d_y) {
  double loss = 0;
  d_y.resize(y.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    const float diff = y[i] - target[i];
    loss += 0.5 * static_cast<double>(diff) * diff;
    d_y[i] = diff;
  }
  return loss;
}

void batch(const Options& o, std::uint64_t first_sample, std::vector<float>& x,
           std::vector<float>& t) {
  x.resize(static_cast<std::size_t>(o.micro_batch) * o.width);
  t.resize(x.size());
  for (int r = 0; r < o.micro_batch; ++r) {
    make_sample(o.width, first_sample + r, &x[static_cast<std::size_t>(r) * o.width],
                &t[static_cast<std::size_t>(r) * o.width]);
  }
}

std::vector<double> run_reference(const Options& o) {
  Stage model(o, 0, o.layers);
  std::vector<double> losses;
  std::vector<float> x, t, d_y;
  for (int step = 0; step < o.steps; ++step) {
    double loss = 0;
    for (int mb = 0; mb < o.global_batch / o.micro_batch; ++mb) {
      batch(o, static_cast<std::uint64_t>(step) * o.global_batch + mb * o.micro_batch, x, t);
      model.forward(mb, x, o.micro_batch);
      loss += loss_and_grad(model.output(mb), t, d_y);
      model.backward(mb, d_y, o.micro_batch, false);
    }
    for (auto& l : model.layers) l.sgd(o.learning_rate, 1.0f / o.global_batch);
    losses.push_back(loss / o.global_batch);
    if (!o.quiet)
      fmt::print("reference step {:>3}/{}  loss {:.6f}\n", step + 1, o.steps, losses.back());
  }
  return losses;
}

// This rank's speed on the model's layers (forward + backward of one micro-batch, 6 b w^2
// FLOPs per layer), measured while every rank measures: on a shared machine that is the speed the
// training will see. The planner uses it instead of a GPU preset.
double measure_tflops(const Options& o) {
  trainer::DenseLayer layer(o.width, false, kLayerSeed);
  const std::size_t elems = static_cast<std::size_t>(o.micro_batch) * o.width;
  std::vector<float> x(elems, 0.5f), y(elems), dy(elems, 0.1f), dx(elems);
  const int passes = 20;
  const auto start = Clock::now();
  for (int i = 0; i < passes; ++i) {
    layer.forward(x, y, o.micro_batch);
    layer.backward(x, y, dy, dx, o.micro_batch);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return passes * 6.0 * o.micro_batch * o.width * o.width / seconds / 1e12;
}

// A plan, where this rank sits in it, and its pipeline and data-parallel communicators (none
// for a spare: a survivor a re-plan leaves without a stage).
struct Placement {
  hm_plan_t plan = nullptr;
  hm_comm_t pp = nullptr, dp = nullptr;
  hm_plan_rank_t me{};
  Placement() = default;
  Placement(const Placement&) = delete;
  Placement& operator=(const Placement&) = delete;
  ~Placement() {
    if (dp) hm_comm_destroy(dp);
    if (pp) hm_comm_destroy(pp);
    if (plan) hm_plan_destroy(plan);
  }
  bool spare() const { return me.stage < 0; }
  // The first sample of micro-batch 0 of this rank's replica in a step: the replicas cut the
  // global batch in order, the first (total % dp) taking one micro-batch more (hm_plan_replan).
  std::uint64_t replica_offset(const Options& o) const {
    const int total = o.global_batch / o.micro_batch;
    const int base = total / me.dp_size, extra = total % me.dp_size;
    return static_cast<std::uint64_t>(me.dp_rank * base + std::min(me.dp_rank, extra)) *
           o.micro_batch;
  }
};

// Takes the plan (which the Placement destroys) and makes its groups: collective over its world.
std::unique_ptr<Placement> place(hm_plan_t plan) {
  auto p = std::make_unique<Placement>();
  p->plan = plan;
  check(hm_plan_get_rank(plan, &p->me), "hm_plan_get_rank");
  check(hm_plan_comm_create(plan, HM_GROUP_PIPELINE, &p->pp), "pipeline group");
  check(hm_plan_comm_create(plan, HM_GROUP_DATA, &p->dp), "data group");
  return p;
}

// The step's sends in flight. Left by an exception (a lost rank), the step still must not drop
// them: each holds its communicator (a leak) and reads a buffer of the step's outbox. Their
// communicator has failed or been revoked by then, so the waits end at once (bounded by the
// timeout in any case); their statuses are the failure already being handled.
struct InFlight {
  std::vector<hm_request_t> requests;
  InFlight() = default;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() {
    for (auto& r : requests) {
      if (r) hm_wait(&r);
    }
  }
  void wait_all(const char* what) {
    for (auto& r : requests) check(hm_wait(&r), what);
  }
};

struct Comms {
  hm_comm_t world = nullptr;
  std::unique_ptr<Placement> placement;  // before the world goes: its communicators are splits
  hm_plan_t plan_taken = nullptr;        // until place() takes it
  ~Comms() {
    if (!placement && plan_taken) hm_plan_destroy(plan_taken);
    placement.reset();
    if (world) hm_comm_destroy(world);
  }
};

// 1F1B: warm-up forwards, then one forward and one backward in turn, then the backwards left.
std::vector<std::pair<bool, int>> one_f_one_b(const hm_plan_rank_t& me) {
  std::vector<std::pair<bool, int>> order;
  const int m = me.micro_batches;
  const int warmup = std::min(me.num_stages - me.stage - 1, m);
  for (int i = 0; i < warmup; ++i) order.push_back({true, i});
  for (int i = 0; i < m - warmup; ++i) {
    order.push_back({true, warmup + i});
    order.push_back({false, i});
  }
  for (int i = m - warmup; i < m; ++i) order.push_back({false, i});
  return order;
}

// After a re-plan: the stage this rank now holds, its layers' weights copied from where they
// are (this rank's old stage, or the survivor hm_plan_get_layer_sources names). Collective over
// the new world.
std::unique_ptr<Stage> restage(const Options& o, hm_comm_t world, const Placement& now,
                               Stage* before) {
  int size = 0, rank = 0;
  check(hm_comm_size(world, &size), "hm_comm_size");
  check(hm_comm_rank(world, &rank), "hm_comm_rank");
  const auto sources_of = [&](int r) {
    std::size_t count = 0;
    check(hm_plan_get_layer_sources(now.plan, r, nullptr, 0, &count), "layer sources");
    std::vector<hm_layer_source_t> sources(count);
    check(hm_plan_get_layer_sources(now.plan, r, sources.data(), count, &count), "layer sources");
    return sources;
  };
  const auto old_layer = [&](int layer) -> trainer::DenseLayer& {
    if (before == nullptr || layer < before->first ||
        layer >= before->first + static_cast<int>(before->layers.size())) {
      throw std::runtime_error(fmt::format("layer {} is not on this rank to send", layer));
    }
    return before->layers[static_cast<std::size_t>(layer - before->first)];
  };
  // Everything this rank is a source of first (nonblocking), then what it fetches.
  InFlight sends;
  for (int r = 0; r < size; ++r) {
    for (const auto& s : sources_of(r)) {
      if (s.rank < 0) {
        throw std::runtime_error(
            fmt::format("layers {}-{} of rank {}: no survivor holds them (they need a checkpoint)",
                        s.first_layer, s.first_layer + s.num_layers - 1, r));
      }
      if (s.rank != rank) continue;
      for (int l = s.first_layer; l < s.first_layer + s.num_layers; ++l) {
        const auto weights = old_layer(l).parameters();
        sends.requests.emplace_back();
        check(hm_isend(world, const_cast<float*>(weights.data()), weights.size(), HM_FLOAT32, r,
                       &sends.requests.back()),
              "send weights");
      }
    }
  }
  std::unique_ptr<Stage> stage;
  if (!now.spare()) {
    stage = std::make_unique<Stage>(o, now.me.first_layer, now.me.num_layers);
    std::vector<int> from(static_cast<std::size_t>(now.me.num_layers), rank);
    for (const auto& s : sources_of(rank)) {
      for (int l = s.first_layer; l < s.first_layer + s.num_layers; ++l) {
        from[static_cast<std::size_t>(l - now.me.first_layer)] = s.rank;
      }
    }
    for (int j = 0; j < now.me.num_layers; ++j) {
      auto weights = stage->layers[static_cast<std::size_t>(j)].parameters();
      const int l = now.me.first_layer + j;
      if (from[static_cast<std::size_t>(j)] == rank) {
        const auto mine = old_layer(l).parameters();
        std::copy(mine.begin(), mine.end(), weights.begin());
      } else {
        check(hm_recv(world, weights.data(), weights.size(), HM_FLOAT32,
                      from[static_cast<std::size_t>(j)]),
              "receive weights");
      }
    }
  }
  sends.wait_all("send weights");
  return stage;
}

std::string describe_plan(const nlohmann::json& plan, const std::string& which) {
  const auto& p = plan[which];
  std::string out =
      fmt::format("{} plan: tp {} x pp {} x dp {}, {} micro-batches of {} per replica\n", which,
                  p["tp"].get<int>(), p["pp"].get<int>(), p["dp"].get<int>(),
                  p["micro_batches"].get<int>(), plan["model"]["micro_batch"].get<int>());
  for (const auto& s : p["stages"]) {
    std::string hosts;
    for (const auto& h : s["hosts"]) hosts += (hosts.empty() ? "" : ",") + h.get<std::string>();
    const std::string island = s["island"].get<std::string>();
    out += fmt::format("  stage {}: layers {}-{} on {} ({})\n", s["stage"].get<int>(),
                       s["first_layer"].get<int>(),
                       s["first_layer"].get<int>() + s["layers"].get<int>() - 1,
                       island.empty() ? "hosts of several islands" : "island " + island, hosts);
  }
  for (const char* kind : {"dp", "pp"}) {
    std::map<std::string, int> count;
    for (const auto& g : p["groups"][kind]) {
      if (g["ranks"].size() > 1)
        ++count[g["transport"].get<std::string>() + " (" + g["link_class"].get<std::string>() +
                ")"];
    }
    std::string list;
    for (const auto& [name, n] : count)
      list += fmt::format("{}{} x{}", list.empty() ? "" : ", ", name, n);
    out += fmt::format("  {} groups: {}\n", kind, list.empty() ? "-" : list);
  }
  out += fmt::format("  predicted step {:.1f} ms\n", p["prediction"]["step_s"].get<double>() * 1e3);
  return out;
}

int run_distributed(const Options& o) {
  Comms c;
  const bool elastic = o.kill_rank >= 0;
  bool recovered = false;
  check(hm_init_from_env(&c.world), "hm_init_from_env");
  int rank = 0, size = 0;
  check(hm_comm_rank(c.world, &rank), "hm_comm_rank");
  check(hm_comm_size(c.world, &size), "hm_comm_size");

  double tflops = measure_tflops(o);
  check(hm_allreduce(c.world, &tflops, &tflops, 1, HM_FLOAT64, HM_AVG), "speed");

  hm_model_t model = HM_MODEL_INITIALIZER;
  model.device_tflops = tflops;
  model.preset = "mlp";
  model.architecture = "mlp";
  model.layers = o.layers;
  model.hidden = o.width;
  model.micro_batch = o.micro_batch;
  model.global_batch = o.global_batch;
  model.dtype_bytes = 4;
  model.tp = 1;  // this trainer splits layers between stages, not inside them
  model.pp = o.pp;
  check(hm_plan_create(c.world, &model, &c.plan_taken), "hm_plan_create");
  std::size_t length = 0;
  check(hm_plan_get_json(c.plan_taken, nullptr, 0, &length), "hm_plan_get_json");
  std::string text(length, '\0');
  check(hm_plan_get_json(c.plan_taken, text.data(), text.size(), nullptr), "hm_plan_get_json");
  text.resize(length - 1);
  const auto plan_json = nlohmann::json::parse(text);
  if (o.placement == "naive") {
    check(hm_plan_select_placement(c.plan_taken, HM_PLACEMENT_NAIVE), "select");
  }
  if (rank == 0 && !o.quiet) {
    fmt::print("measured speed on the model's layers: {:.2f} GFLOPS per rank (used by the plan)\n",
               tflops * 1e3);
    std::fputs(describe_plan(plan_json, o.placement).c_str(), stdout);
  }

  c.placement = place(c.plan_taken);
  std::unique_ptr<Stage> stage =
      std::make_unique<Stage>(o, c.placement->me.first_layer, c.placement->me.num_layers);
  const std::size_t act_elems = static_cast<std::size_t>(o.micro_batch) * o.width;

  // One training step on this rank's stage; returns the loss it adds (the last stage's) and the
  // seconds it computed. Throws CallFailed when a call fails.
  const auto train_step = [&](int step, double& compute) {
    Placement& pl = *c.placement;
    compute = 0;
    if (pl.spare()) return 0.0;
    const hm_plan_rank_t& me = pl.me;
    const bool first = me.stage == 0, last = me.stage == me.num_stages - 1;
    auto timed = [&](auto&& body) {
      const auto start = Clock::now();
      body();
      compute += std::chrono::duration<double>(Clock::now() - start).count();
    };
    std::vector<std::vector<float>> outbox;  // buffers of sends in flight this step
    InFlight sends;                          // after outbox: waited before it goes
    std::map<int, std::vector<float>> targets;
    std::vector<float> x, t;
    double loss = 0;
    bool forwarded = false;
    for (const auto& [forward, mb] : one_f_one_b(me)) {
      if (forwarded && step == o.kill_step && rank == o.kill_rank && !recovered) {
        std::ofstream(o.kill_stamp) << fmt::format("{:.3f}\n", epoch_ms());
        std::fflush(stdout);
        std::raise(SIGKILL);
      }
      // Samples of this replica's micro-batch: the global batch cut replica by replica.
      const std::uint64_t first_sample = static_cast<std::uint64_t>(step) * o.global_batch +
                                         pl.replica_offset(o) +
                                         static_cast<std::uint64_t>(mb) * o.micro_batch;
      if (forward) {
        std::vector<float> input(act_elems);
        if (first || last) timed([&] { batch(o, first_sample, x, t); });
        if (first) {
          input = x;
        } else {
          check(hm_recv(pl.pp, input.data(), act_elems, HM_FLOAT32, me.stage - 1),
                "recv activation");
        }
        if (last) targets[mb] = t;
        timed([&] { stage->forward(mb, std::move(input), o.micro_batch); });
        forwarded = true;
        if (!last) {
          outbox.push_back(stage->output(mb));
          sends.requests.emplace_back();
          check(hm_isend(pl.pp, outbox.back().data(), act_elems, HM_FLOAT32, me.stage + 1,
                         &sends.requests.back()),
                "send activation");
        }
      } else {
        std::vector<float> d_out(act_elems);
        if (last) {
          timed([&] { loss += loss_and_grad(stage->output(mb), targets[mb], d_out); });
          targets.erase(mb);
        } else {
          check(hm_recv(pl.pp, d_out.data(), act_elems, HM_FLOAT32, me.stage + 1), "recv gradient");
        }
        std::vector<float> d_in;
        timed([&] { d_in = stage->backward(mb, std::move(d_out), o.micro_batch, !first); });
        if (!first) {
          outbox.push_back(std::move(d_in));
          sends.requests.emplace_back();
          check(hm_isend(pl.pp, outbox.back().data(), act_elems, HM_FLOAT32, me.stage - 1,
                         &sends.requests.back()),
                "send gradient");
        }
      }
    }
    sends.wait_all("send");
    // Gradients of the stage, summed over its data-parallel replicas, then one SGD step on the
    // mean over the global batch.
    std::vector<float> grads(stage->parameter_count());
    std::size_t at = 0;
    for (auto& l : stage->layers) {
      std::copy(l.gradients().begin(), l.gradients().end(), grads.begin() + at);
      at += l.gradients().size();
    }
    check(hm_allreduce(pl.dp, grads.data(), grads.data(), grads.size(), HM_FLOAT32, HM_SUM),
          "gradient allreduce");
    timed([&] {
      at = 0;
      for (auto& l : stage->layers) {
        std::copy(grads.begin() + at, grads.begin() + at + l.gradients().size(),
                  l.gradients().begin());
        at += l.gradients().size();
        l.sgd(o.learning_rate, 1.0f / o.global_batch);
      }
    });
    return loss;
  };

  // The survivors of a lost rank: revoke (so no rank waits for its timeout), shrink, re-plan,
  // copy the weights, and go on with the step that failed.
  const auto recover = [&](const CallFailed& failure) {
    const auto start = Clock::now();
    if (c.placement->pp) hm_comm_revoke(c.placement->pp);
    if (c.placement->dp) hm_comm_revoke(c.placement->dp);
    hm_comm_revoke(c.world);
    hm_comm_t survivors = nullptr;
    check(hm_comm_shrink(c.world, nullptr, 0, HM_SHRINK_FAILED, &survivors), "hm_comm_shrink");
    const auto shrunk = Clock::now();
    hm_plan_t replanned = nullptr;
    const hm_status_t replan_status = hm_plan_replan(c.placement->plan, survivors, &replanned);
    if (replan_status != HM_SUCCESS) hm_comm_destroy(survivors);
    check(replan_status, "hm_plan_replan");
    auto placement = place(replanned);
    auto restaged = restage(o, survivors, *placement, stage.get());
    const auto copied = Clock::now();
    const int old_size = size;
    c.placement = std::move(placement);  // the old groups go before the old world
    hm_comm_destroy(c.world);
    c.world = survivors;
    stage = std::move(restaged);
    check(hm_comm_rank(c.world, &rank), "hm_comm_rank");
    check(hm_comm_size(c.world, &size), "hm_comm_size");
    recovered = true;
    if (rank == 0 && !o.quiet) {
      const auto ms = [](auto a, auto b) {
        return std::chrono::duration<double, std::milli>(b - a).count();
      };
      const hm_plan_rank_t& me = c.placement->me;
      fmt::print(
          "lost {} of {} ranks ({}): shrink {:.0f} ms, re-plan and weights {:.0f} ms; re-planned "
          "on {} ranks: pp {} x dp {}, {} micro-batches per replica\n",
          old_size - size, old_size, failure.what(), ms(start, shrunk), ms(shrunk, copied), size,
          me.num_stages, me.dp_size, me.micro_batches);
      std::fflush(stdout);
    }
  };

  std::vector<double> losses, step_ms, compute_ms;
  bool report_recovery = false;
  for (int step = 0; step < o.steps;) {
    const auto step_start = Clock::now();
    double compute = 0, loss = 0;
    try {
      loss = train_step(step, compute);
      const double elapsed = std::chrono::duration<double>(Clock::now() - step_start).count();
      // Report: the loss over the whole global batch, the slowest rank's step, the mean compute.
      double sums[2] = {loss, compute}, slowest = elapsed;
      check(hm_allreduce(c.world, sums, sums, 2, HM_FLOAT64, HM_SUM), "loss");
      check(hm_allreduce(c.world, &slowest, &slowest, 1, HM_FLOAT64, HM_MAX), "time");
      losses.push_back(sums[0] / o.global_batch);
      step_ms.push_back(slowest * 1e3);
      compute_ms.push_back(sums[1] / size * 1e3);
    } catch (const CallFailed& failure) {
      if (!elastic || !failure.lost_a_rank()) throw;
      recover(failure);
      report_recovery = true;
      continue;  // the same step again, on the survivors
    }
    if (rank == 0 && !o.quiet) {
      fmt::print(
          "{} step {:>3}/{}  loss {:.6f}  time {:6.1f} ms = compute {:5.1f} + comm/wait {:5.1f}\n",
          o.placement, step + 1, o.steps, losses.back(), step_ms.back(), compute_ms.back(),
          step_ms.back() - compute_ms.back());
    }
    if (rank == 0 && report_recovery) {
      double killed_at = 0;
      std::ifstream(o.kill_stamp) >> killed_at;
      fmt::print("recovered: {:.0f} ms from the kill to the end of the first resumed step\n",
                 epoch_ms() - killed_at);
    }
    std::fflush(stdout);
    report_recovery = false;
    ++step;
  }

  int status = 0;
  if (rank == 0) {
    // Steady state: leave out the first steps (connections, page faults).
    const int skip = std::min(3, o.steps - 1);
    double mean = 0, mean_compute = 0;
    for (int s = skip; s < o.steps; ++s) {
      mean += step_ms[s];
      mean_compute += compute_ms[s];
    }
    mean /= o.steps - skip;
    mean_compute /= o.steps - skip;
    const double predicted = plan_json[o.placement]["prediction"]["step_s"].get<double>() * 1e3;
    fmt::print(
        "{}: mean step {:.1f} ms (compute {:.1f}, comm/wait {:.1f}) over steps {}-{}; "
        "predicted {:.1f} ms\n",
        o.placement, mean, mean_compute, mean - mean_compute, skip + 1, o.steps, predicted);
    if (!o.compare_with.empty()) {
      std::ifstream in(o.compare_with);
      std::vector<double> ref;
      for (double v; in >> v;) ref.push_back(v);
      double worst = 0;
      bool ok = ref.size() == losses.size();
      for (std::size_t s = 0; ok && s < ref.size(); ++s) {
        const double rel = std::abs(losses[s] - ref[s]) / std::max(1e-12, std::abs(ref[s]));
        worst = std::max(worst, rel);
        ok = rel <= o.tolerance;
      }
      const bool falls = losses.back() < 0.5 * losses.front();
      fmt::print(
          "{}: loss {:.6f} -> {:.6f} ({}); the single-process run's differs by at most "
          "{:.2e} relative ({} {:.0e}): {}\n",
          o.placement, losses.front(), losses.back(), falls ? "falls" : "does NOT fall", worst,
          ok ? "within" : "OUTSIDE", o.tolerance, ok && falls ? "OK" : "FAILED");
      if (!ok || !falls) status = 1;
    }
    if (!o.summary_out.empty()) {
      nlohmann::json summary = {{"placement", o.placement},
                                {"mean_step_ms", mean},
                                {"mean_compute_ms", mean_compute},
                                {"predicted_step_ms", predicted},
                                {"predicted_holmes_step_ms",
                                 plan_json["holmes"]["prediction"]["step_s"].get<double>() * 1e3},
                                {"predicted_naive_step_ms",
                                 plan_json["naive"]["prediction"]["step_s"].get<double>() * 1e3},
                                {"losses", losses}};
      std::ofstream(o.summary_out) << summary.dump(2) << "\n";
    }
  }
  // Out before the others may exit: a launcher stops the job as soon as one rank fails.
  std::fflush(stdout);
  double s = status;
  check(hm_allreduce(c.world, &s, &s, 1, HM_FLOAT64, HM_MAX), "status");
  return s > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"holmes-trainer: pipeline + data-parallel training of a dense network over Holmes"};
  app.add_option("--layers", o.layers, "dense layers")->check(CLI::Range(1, 1024));
  app.add_option("--width", o.width, "units per layer")->check(CLI::Range(1, 8192));
  app.add_option("--micro-batch", o.micro_batch, "samples per micro-batch")
      ->check(CLI::Range(1, 65536));
  app.add_option("--global-batch", o.global_batch, "samples per step, all replicas")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--steps", o.steps, "training steps")->check(CLI::Range(1, 100000));
  app.add_option("--pp", o.pp, "pipeline stages (0: the planner chooses)")
      ->check(CLI::Range(0, 1024));
  app.add_option("--lr", o.learning_rate, "learning rate");
  app.add_option("--placement", o.placement, "holmes or naive")
      ->check(CLI::IsMember({"holmes", "naive"}));
  app.add_flag("--reference", o.reference, "train in this one process, without Holmes");
  app.add_option("--losses-out", o.losses_out, "write the loss of every step (reference)");
  app.add_option("--compare-with", o.compare_with, "a reference's --losses-out to match");
  app.add_option("--tolerance", o.tolerance, "relative loss difference allowed per step");
  app.add_option("--summary", o.summary_out, "write mean step time, prediction, losses (JSON)");
  app.add_flag("--quiet", o.quiet, "only the summary lines");
  app.add_option("--kill-rank", o.kill_rank,
                 "this rank SIGKILLs itself in --kill-step; the others recover and go on");
  app.add_option("--kill-step", o.kill_step, "the step (from 0) --kill-rank dies in")
      ->check(CLI::Range(0, 100000));
  app.add_option("--kill-stamp", o.kill_stamp, "file the victim writes its time of death to");
  CLI11_PARSE(app, argc, argv);
  if (o.global_batch % o.micro_batch != 0) {
    std::fprintf(stderr, "holmes-trainer: --global-batch must be a multiple of --micro-batch\n");
    return 2;
  }
  if (o.kill_rank >= 0 && (o.kill_step < 0 || o.kill_stamp.empty())) {
    std::fprintf(stderr, "holmes-trainer: --kill-rank needs --kill-step and --kill-stamp\n");
    return 2;
  }
  try {
    if (o.reference) {
      const auto losses = run_reference(o);
      if (!o.losses_out.empty()) {
        std::ofstream out(o.losses_out);
        for (double l : losses) out << fmt::format("{:.17g}\n", l);
      }
      return 0;
    }
    return run_distributed(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "holmes-trainer: %s\n", e.what());
    return 1;
  }
}
