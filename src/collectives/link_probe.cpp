#include "collectives/link_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/reduce.hpp"

namespace holmes {
namespace {

constexpr std::size_t kPingBytes = 8;
constexpr std::size_t kSmallBytes = std::size_t{64} << 10;
constexpr std::size_t kLargeBytes = std::size_t{1} << 20;
// Warm-ups first (connections made on first use, TCP windows, page faults), then the timed ones.
constexpr int kPingWarmups = 3;
constexpr int kPings = 31;
constexpr int kTransferWarmups = 2;
constexpr int kTransfers = 5;
// The reduction is timed on this many float32 elements (1 MiB of result).
constexpr std::size_t kReduceCount = std::size_t{1} << 18;
constexpr int kReduceRuns = 9;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double elapsed_us(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - since)
      .count();
}

// The two ways a group measures, both over the same sizes. Every message has a step of its
// own, so that nothing depends on the order in which a transport delivers them.
class Measurement {
 public:
  explicit Measurement(CollectiveContext& group)
      : group_(group), ping_(kPingBytes), out_(kLargeBytes), in_(kLargeBytes) {
    samples_.small_bytes = static_cast<double>(kSmallBytes);
    samples_.large_bytes = static_cast<double>(kLargeBytes);
  }

  // Position 0 times, position 1 answers: 8 bytes there and back (latency: half the round
  // trip), then each size one way with 8 bytes of acknowledgement back.
  LinkSamples pair() {
    const bool timing = group_.rank() == 0;
    const int peer = 1 - group_.rank();
    // The timer sends `go` and receives `back`; its peer receives `go` and sends `back`.
    const auto round_trip = [&](std::uint64_t there, std::span<std::byte> go,
                                std::span<std::byte> back) {
      if (timing) {
        group_.wait(group_.send(peer, there, go));
        group_.wait(group_.recv(peer, there + 1, back));
      } else {
        group_.wait(group_.recv(peer, there, go));
        group_.wait(group_.send(peer, there + 1, back));
      }
    };
    repeat(kPingWarmups, kPings, samples_.latency_us, [&](std::uint64_t there) {
      round_trip(there, ping_, ping_);
      return 0.5;  // one way of the round trip
    });
    for (const std::size_t bytes : {kSmallBytes, kLargeBytes}) {
      const std::span<std::byte> message(out_.data(), bytes);
      repeat(kTransferWarmups, kTransfers, times_of(bytes), [&](std::uint64_t there) {
        round_trip(there, message, ping_);
        return 1.0;
      });
    }
    return samples_;
  }

  // Every position at once sends to the next and receives from the previous, as a ring's step
  // does: what one step takes while all of the group's links (and the cores they share) are
  // busy. Latency: an 8-byte step.
  LinkSamples ring() {
    const int g = group_.size();
    const int next = (group_.rank() + 1) % g;
    const int previous = (group_.rank() + g - 1) % g;
    auto step_of = [&](std::size_t bytes) {
      return [this, bytes, next, previous](std::uint64_t step) {
        auto in = group_.recv(previous, step, std::span<std::byte>(in_.data(), bytes));
        group_.wait(group_.send(next, step, std::span<const std::byte>(out_.data(), bytes)));
        group_.wait(in);
        return 1.0;
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

  // Runs `once(step)` warmups + timed times (each takes two steps); keeps the timed runs'
  // microseconds times the factor `once` returns.
  template <typename Once>
  void repeat(int warmups, int timed, std::vector<double>& out, Once&& once) {
    for (int i = 0; i < warmups + timed; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const double factor = once(step_);
      step_ += 2;
      if (i >= warmups) out.push_back(elapsed_us(start) * factor);
    }
  }

  CollectiveContext& group_;
  std::uint64_t step_ = 0;
  std::vector<std::byte> ping_;
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
  TierCosts mine;
  for (const auto& group : probe_groups(h)) {
    const auto me = std::find(group.ranks.begin(), group.ranks.end(), ctx.rank());
    if (me == group.ranks.end()) continue;
    // Each tier's messages in a phase of their own: tags never meet another tier's.
    auto view = ctx.view(group.ranks, 1 + static_cast<std::uint64_t>(group.tier));
    Measurement measurement(view);
    const LinkSamples samples =
        group.tier == Tier::kSameHost ? measurement.ring() : measurement.pair();
    // One rank of each group reports: the pair's timer, the host's first rank.
    if (me == group.ranks.begin()) {
      mine.tiers[static_cast<std::size_t>(group.tier)] = fit_samples(samples);
    }
  }
  const double us_per_gb = time_reduction();
  if (us_per_gb > 0) mine.reduce_gbytes_per_s = 1e6 / us_per_gb;
  const ProbeValues values = encode_measurements(mine);
  std::copy_n(values.begin(), std::min(out.size(), values.size()), out.begin());
}

}  // namespace holmes
