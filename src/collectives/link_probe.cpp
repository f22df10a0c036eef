#include "collectives/link_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include "collectives/algorithms.hpp"
#include "core/reduce.hpp"
#include "core/thread_affinity.hpp"

namespace holmes {
namespace {

constexpr std::size_t kPingBytes = 8;
constexpr std::size_t kSmallBytes = std::size_t{64} << 10;
constexpr std::size_t kLargeBytes = std::size_t{1} << 20;
// Warm-ups first (connections made on first use, TCP windows, page faults), then the timed ones.
constexpr int kPingWarmups = 3;
constexpr int kPings = 31;
constexpr int kTransferWarmups = 2;
constexpr int kTransfers = 9;
// The reduction is timed on this many float32 elements (1 MiB of result).
constexpr std::size_t kReduceCount = std::size_t{1} << 18;
constexpr int kReduceRuns = 9;
// The barriers between the groups run in a phase after the tiers' (1 + tier); each barrier
// takes a range of its steps (a dissemination barrier takes log2 of the ranks).
constexpr std::uint64_t kGatePhase = 1 + kTiers;
constexpr std::uint64_t kStepsPerGate = 64;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double elapsed_us(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - since)
      .count();
}

// A group's measurement. Every message has a step of its own, so that nothing depends on the
// order in which a transport delivers them.
class Measurement {
 public:
  explicit Measurement(CollectiveContext& group)
      : group_(group), out_(kLargeBytes), in_(kLargeBytes) {
    samples_.small_bytes = static_cast<double>(kSmallBytes);
    samples_.large_bytes = static_cast<double>(kLargeBytes);
  }

  // Every position at once sends to the next and receives from the previous, as a ring's step
  // does (for two ranks, an exchange): what one step takes while all of the group's links, both
  // ways, and the cores they share are busy. A step of every algorithm sends and receives at
  // once; where the wire is the limit both ways run at its rate, but where CPU copies are (ranks
  // on one machine), a rank's core serves both, and a message sent one way alone would show
  // twice the rate the algorithms get. Latency: an 8-byte step.
  LinkSamples ring() {
    const int g = group_.size();
    const int next = (group_.rank() + 1) % g;
    const int previous = (group_.rank() + g - 1) % g;
    auto step_of = [&](std::size_t bytes) {
      return [this, bytes, next, previous](std::uint64_t step) {
        auto in = group_.recv(previous, step, std::span<std::byte>(in_.data(), bytes));
        group_.wait(group_.send(next, step, std::span<const std::byte>(out_.data(), bytes)));
        group_.wait(in);
      };
    };
    repeat(kPingWarmups, kPings, samples_.latency_us, step_of(kPingBytes));
    for (const std::size_t bytes : {kSmallBytes, kLargeBytes}) {
      repeat(kTransferWarmups, kTransfers, times_of(bytes), step_of(bytes));
    }
    return samples_;
  }

 private:
  std::vector<double>& times_of(std::size_t bytes) {
    return bytes == kSmallBytes ? samples_.small_us : samples_.large_us;
  }

  // Runs `once(step)` warmups + timed times, each with a step of its own; keeps the timed runs'
  // microseconds. Each run drives the transports as a small collective does, whatever waits
  // slept before it: a wait longer than the yield window (a barrier, a connection's first
  // message) hands them back to their threads, and every later message of the probe would then
  // cost those threads' wake-ups (measured here: 50 us where a driven step takes 6).
  template <typename Once>
  void repeat(int warmups, int timed, std::vector<double>& out, Once&& once) {
    for (int i = 0; i < warmups + timed; ++i) {
      group_.renew_drive();
      const auto start = std::chrono::steady_clock::now();
      once(step_++);
      if (i < warmups) continue;
      out.push_back(elapsed_us(start));
    }
  }

  CollectiveContext& group_;
  std::uint64_t step_ = 0;
  std::vector<std::byte> out_;
  std::vector<std::byte> in_;
  LinkSamples samples_;
};

double time_reduction() {
  std::vector<float> a(kReduceCount, 1.0f);
  std::vector<float> b(kReduceCount, 2.0f);
  std::vector<float> out(kReduceCount);
  reduce(HM_FLOAT32, HM_SUM, out.data(), a.data(), b.data(), kReduceCount);  // pages, caches
  std::vector<double> runs;
  for (int i = 0; i < kReduceRuns; ++i) {
    const auto start = std::chrono::steady_clock::now();
    reduce(HM_FLOAT32, HM_SUM, out.data(), a.data(), b.data(), kReduceCount);
    runs.push_back(elapsed_us(start));
  }
  return reduce_us_per_gb(runs, static_cast<double>(kReduceCount * sizeof(float)));
}

}  // namespace

int members_per_cpu(const ProbeGroup& group, int cpus) {
  if (group.tier != Tier::kSameHost || cpus < 1) return 1;
  const int members = static_cast<int>(group.ranks.size());
  return (members + cpus - 1) / cpus;
}

std::vector<ProbeGroup> probe_groups(const Hierarchy& h) {
  std::vector<ProbeGroup> groups;
  // Same host: the ranks of the first host that has two or more, in a ring. One host stands for
  // all (the model has one number per tier); the other hosts' ranks stay idle meanwhile, so
  // that hosts emulated on one machine do not measure each other's load.
  std::vector<std::vector<int>> by_host;
  for (int r = 0; r < h.size(); ++r) {
    const auto host = static_cast<std::size_t>(h.host[static_cast<std::size_t>(r)]);
    if (by_host.size() <= host) by_host.resize(host + 1);
    by_host[host].push_back(r);
  }
  for (auto& ranks : by_host) {
    if (ranks.size() >= 2) {
      groups.push_back({Tier::kSameHost, std::move(ranks)});
      break;
    }
  }
  // The other tiers: the first pair across each.
  const auto across = [&h](Tier tier, int a, int b) {
    const auto ua = static_cast<std::size_t>(a);
    const auto ub = static_cast<std::size_t>(b);
    return tier == Tier::kSameIsland ? h.host[ua] != h.host[ub] && h.island[ua] == h.island[ub]
                                     : h.island[ua] != h.island[ub];
  };
  for (const Tier tier : {Tier::kSameIsland, Tier::kOtherIsland}) {
    bool found = false;
    for (int a = 0; a < h.size() && !found; ++a) {
      for (int b = a + 1; b < h.size() && !found; ++b) {
        if (across(tier, a, b)) {
          groups.push_back({tier, {a, b}});
          found = true;
        }
      }
    }
  }
  return groups;
}

std::optional<LinkCost> fit_samples(const LinkSamples& s) {
  if (s.latency_us.empty() || s.small_us.empty() || s.large_us.empty() ||
      !(s.large_bytes > s.small_bytes)) {
    return std::nullopt;
  }
  // The medians, unless load delayed most small runs past the large ones: then the fastest run
  // of each size, what the link does when nothing else holds the cores.
  double extra_us = median(s.large_us) - median(s.small_us);
  if (!(extra_us > 0)) {
    extra_us = *std::min_element(s.large_us.begin(), s.large_us.end()) -
               *std::min_element(s.small_us.begin(), s.small_us.end());
  }
  LinkCost link;
  link.latency_us = median(s.latency_us);
  if (extra_us > 0 && std::isfinite(extra_us)) {
    link.gbytes_per_s = (s.large_bytes - s.small_bytes) / (extra_us * 1e3);
    return link;
  }
  // Still no slope: the two sizes took different paths (shm moves 1 MiB with one CMA copy and
  // 64 KiB through its ring, waiting on the peer). The large messages alone, less the latency.
  const double large_us = median(s.large_us) - link.latency_us;
  if (!(large_us > 0) || !std::isfinite(large_us)) return std::nullopt;
  link.gbytes_per_s = s.large_bytes / (large_us * 1e3);
  return link;
}

double reduce_us_per_gb(std::span<const double> run_us, double bytes) {
  if (run_us.empty() || !(bytes > 0)) return 0;
  return median({run_us.begin(), run_us.end()}) * (1e9 / bytes);
}

ProbeValues encode_measurements(const TierCosts& costs) {
  ProbeValues values{};
  for (std::size_t t = 0; t < kTiers; ++t) {
    if (!costs.tiers[t]) continue;
    values[2 * t] = costs.tiers[t]->latency_us;
    values[2 * t + 1] = 1e6 / costs.tiers[t]->gbytes_per_s;
  }
  if (costs.reduce_gbytes_per_s) values[2 * kTiers] = 1e6 / *costs.reduce_gbytes_per_s;
  return values;
}

TierCosts agree_measurements(std::span<const double> all_ranks) {
  ProbeValues agreed{};
  for (std::size_t v = 0; v < kProbeValues; ++v) {
    std::vector<double> reported;
    for (std::size_t i = 0; i + kProbeValues <= all_ranks.size(); i += kProbeValues) {
      const double x = all_ranks[i + v];
      // Anything not a positive finite number is "not measured" (or a hostile rank's bytes).
      if (x > 0 && std::isfinite(x)) reported.push_back(x);
    }
    if (!reported.empty()) agreed[v] = median(std::move(reported));
  }
  TierCosts costs;
  for (std::size_t t = 0; t < kTiers; ++t) {
    // A tier counts once its bandwidth was measured (its latency may round to 0 on one host).
    if (agreed[2 * t + 1] > 0) costs.tiers[t] = LinkCost{agreed[2 * t], 1e6 / agreed[2 * t + 1]};
  }
  if (agreed[2 * kTiers] > 0) costs.reduce_gbytes_per_s = 1e6 / agreed[2 * kTiers];
  return costs;
}

void measure_links(CollectiveContext& ctx, const Hierarchy& h, std::span<double> out) {
  // One group at a time, every rank waiting at a barrier in between: a rank that has finished
  // its groups would otherwise time its reduction, or poll for a group it waits on, on the
  // cores the measuring pair runs on, and on emulated hosts that share a machine the latencies
  // would follow that load (measured here: same island 10 to 56 us from one run to the next).
  std::vector<int> everyone(static_cast<std::size_t>(ctx.size()));
  for (int r = 0; r < ctx.size(); ++r) everyone[static_cast<std::size_t>(r)] = r;
  const CollectiveContext gate = ctx.view(everyone, kGatePhase);
  std::uint64_t barriers = 0;
  // A rank that measured nothing since the last barrier sleeps through the next at once: it
  // would otherwise yield its core for a while (a driven wait's window) to the pair measuring.
  bool measured = true;
  const auto barrier = [&] {
    CollectiveContext at = gate.shifted(barriers++ * kStepsPerGate);
    if (measured) {
      dissemination_barrier(at);
    } else {
      const DriveScope sleep = ctx.pause_drive();
      dissemination_barrier(at);
    }
  };
  TierCosts mine;
  for (const auto& group : probe_groups(h)) {
    barrier();
    const auto me = std::find(group.ranks.begin(), group.ranks.end(), ctx.rank());
    measured = me != group.ranks.end();
    if (!measured) continue;
    // Each member on a CPU of its own (its position picks one), for the measurement only.
    const auto position = static_cast<int>(me - group.ranks.begin());
    const PinnedToCpu pin(position);
    // Each tier's messages in a phase of their own: tags never meet another tier's.
    auto view = ctx.view(group.ranks, 1 + static_cast<std::uint64_t>(group.tier));
    Measurement measurement(view);
    const LinkSamples samples = measurement.ring();
    // Every member reports: the model takes the median.
    if (auto link = fit_samples(samples)) {
      link->gbytes_per_s *= members_per_cpu(group, pin.choices());
      mine.tiers[static_cast<std::size_t>(group.tier)] = link;
    }
  }
  barrier();
  const double us_per_gb = time_reduction();
  if (us_per_gb > 0) mine.reduce_gbytes_per_s = 1e6 / us_per_gb;
  const ProbeValues values = encode_measurements(mine);
  std::copy_n(values.begin(), std::min(out.size(), values.size()), out.begin());
}

}  // namespace holmes
