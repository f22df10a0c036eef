// holmes-trainer: a small pipeline + data-parallel trainer that links Holmes the way a custom
// trainer would. A stack of dense layers (dense.hpp) learns a linear map from synthetic data
// (sample k is the same on every rank; its target is A x_k for a fixed random A). The planner
// chooses the pipeline stages, the data-parallel groups and each stage's layers
// (hm_plan_create); activations and their gradients go between stages with hm_isend/hm_recv
// in the 1F1B order; gradients are summed over the data-parallel group with hm_allreduce.
//
//   holmes-trainer --reference --losses-out ref.txt          one process, no Holmes
//   holmes-run -n 8 -- holmes-trainer --compare-with ref.txt [--placement naive]
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

void check(hm_status_t status, const char* what) {
  if (status != HM_SUCCESS) {
    throw std::runtime_error(
        fmt::format("{}: {} ({})", what, hm_last_error_message(), hm_status_string(status)));
  }
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

struct Comms {
  hm_comm_t world = nullptr, pp = nullptr, dp = nullptr;
  hm_plan_t plan = nullptr;
  ~Comms() {
    if (dp) hm_comm_destroy(dp);
    if (pp) hm_comm_destroy(pp);
    if (plan) hm_plan_destroy(plan);
    if (world) hm_comm_destroy(world);
  }
};

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
  check(hm_plan_create(c.world, &model, &c.plan), "hm_plan_create");
  std::size_t length = 0;
  check(hm_plan_get_json(c.plan, nullptr, 0, &length), "hm_plan_get_json");
  std::string text(length, '\0');
  check(hm_plan_get_json(c.plan, text.data(), text.size(), nullptr), "hm_plan_get_json");
  text.resize(length - 1);
  const auto plan_json = nlohmann::json::parse(text);
  if (o.placement == "naive") check(hm_plan_select_placement(c.plan, HM_PLACEMENT_NAIVE), "select");
  if (rank == 0 && !o.quiet) {
    fmt::print("measured speed on the model's layers: {:.2f} GFLOPS per rank (used by the plan)\n",
               tflops * 1e3);
    std::fputs(describe_plan(plan_json, o.placement).c_str(), stdout);
  }

  hm_plan_rank_t me{};
  check(hm_plan_get_rank(c.plan, &me), "hm_plan_get_rank");
  check(hm_plan_comm_create(c.plan, HM_GROUP_PIPELINE, &c.pp), "pipeline group");
  check(hm_plan_comm_create(c.plan, HM_GROUP_DATA, &c.dp), "data group");
  const bool first = me.stage == 0, last = me.stage == me.num_stages - 1;
  const int m = me.micro_batches;
  Stage stage(o, me.first_layer, me.num_layers);
  const std::size_t act_elems = static_cast<std::size_t>(o.micro_batch) * o.width;

  // 1F1B: warm-up forwards, then one forward and one backward in turn, then the backwards left.
  std::vector<std::pair<bool, int>> order;
  const int warmup = std::min(me.num_stages - me.stage - 1, m);
  for (int i = 0; i < warmup; ++i) order.push_back({true, i});
  for (int i = 0; i < m - warmup; ++i) {
    order.push_back({true, warmup + i});
    order.push_back({false, i});
  }
  for (int i = m - warmup; i < m; ++i) order.push_back({false, i});

  std::vector<double> losses, step_ms, compute_ms;
  std::vector<float> x, t, d_y, grads(stage.parameter_count());
  for (int step = 0; step < o.steps; ++step) {
    const auto step_start = Clock::now();
    double compute = 0;
    auto timed = [&](auto&& body) {
      const auto start = Clock::now();
      body();
      compute += std::chrono::duration<double>(Clock::now() - start).count();
    };
    std::vector<std::vector<float>> outbox;  // buffers of sends in flight this step
    std::vector<hm_request_t> sends;
    std::map<int, std::vector<float>> targets;
    double loss = 0;
    for (const auto& [forward, mb] : order) {
      // Samples of this replica's micro-batch: the global batch cut replica by replica.
      const std::uint64_t first_sample =
          static_cast<std::uint64_t>(step) * o.global_batch +
          static_cast<std::uint64_t>(me.dp_rank) * m * o.micro_batch +
          static_cast<std::uint64_t>(mb) * o.micro_batch;
      if (forward) {
        std::vector<float> input(act_elems);
        if (first || last) timed([&] { batch(o, first_sample, x, t); });
        if (first) {
          input = x;
        } else {
          check(hm_recv(c.pp, input.data(), act_elems, HM_FLOAT32, me.stage - 1),
                "recv activation");
        }
        if (last) targets[mb] = t;
        timed([&] { stage.forward(mb, std::move(input), o.micro_batch); });
        if (!last) {
          outbox.push_back(stage.output(mb));
          sends.emplace_back();
          check(hm_isend(c.pp, outbox.back().data(), act_elems, HM_FLOAT32, me.stage + 1,
                         &sends.back()),
                "send activation");
        }
      } else {
        std::vector<float> d_out(act_elems);
        if (last) {
          timed([&] { loss += loss_and_grad(stage.output(mb), targets[mb], d_out); });
          targets.erase(mb);
        } else {
          check(hm_recv(c.pp, d_out.data(), act_elems, HM_FLOAT32, me.stage + 1), "recv gradient");
        }
        std::vector<float> d_in;
        timed([&] { d_in = stage.backward(mb, std::move(d_out), o.micro_batch, !first); });
        if (!first) {
          outbox.push_back(std::move(d_in));
          sends.emplace_back();
          check(hm_isend(c.pp, outbox.back().data(), act_elems, HM_FLOAT32, me.stage - 1,
                         &sends.back()),
                "send gradient");
        }
      }
    }
    for (auto& r : sends) check(hm_wait(&r), "send");
    // Gradients of the stage, summed over its data-parallel replicas, then one SGD step on the
    // mean over the global batch.
    std::size_t at = 0;
    for (auto& l : stage.layers) {
      std::copy(l.gradients().begin(), l.gradients().end(), grads.begin() + at);
      at += l.gradients().size();
    }
    check(hm_allreduce(c.dp, grads.data(), grads.data(), grads.size(), HM_FLOAT32, HM_SUM),
          "gradient allreduce");
    timed([&] {
      at = 0;
      for (auto& l : stage.layers) {
        std::copy(grads.begin() + at, grads.begin() + at + l.gradients().size(),
                  l.gradients().begin());
        at += l.gradients().size();
        l.sgd(o.learning_rate, 1.0f / o.global_batch);
      }
    });
    const double elapsed = std::chrono::duration<double>(Clock::now() - step_start).count();
    // Report: the loss over the whole global batch, the slowest rank's step, the mean compute.
    double sums[2] = {loss, compute}, slowest = elapsed;
    check(hm_allreduce(c.world, sums, sums, 2, HM_FLOAT64, HM_SUM), "loss");
    check(hm_allreduce(c.world, &slowest, &slowest, 1, HM_FLOAT64, HM_MAX), "time");
    losses.push_back(sums[0] / o.global_batch);
    step_ms.push_back(slowest * 1e3);
    compute_ms.push_back(sums[1] / size * 1e3);
    if (rank == 0 && !o.quiet) {
      fmt::print(
          "{} step {:>3}/{}  loss {:.6f}  time {:6.1f} ms = compute {:5.1f} + comm/wait {:5.1f}\n",
          o.placement, step + 1, o.steps, losses.back(), step_ms.back(), compute_ms.back(),
          step_ms.back() - compute_ms.back());
      std::fflush(stdout);
    }
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
  CLI11_PARSE(app, argc, argv);
  if (o.global_batch % o.micro_batch != 0) {
    std::fprintf(stderr, "holmes-trainer: --global-batch must be a multiple of --micro-batch\n");
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
