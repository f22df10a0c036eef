#include "collectives/link_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "core/reduce.hpp"

namespace holmes {
namespace {

constexpr std::size_t kPingBytes = 8;
constexpr std::size_t kSmallBytes = std::size_t{64} << 10;
constexpr std::size_t kLargeBytes = std::size_t{1} << 20;
// Warm-ups first (connections made on first use, TCP windows, page faults), then the timed ones.
constexpr int kPingWarmups = 3;
constexpr int kPings = 15;
constexpr int kTransferWarmups = 2;
constexpr int kTransfers = 5;
// The reduction is timed on this many float32 elements (1 MiB of result).
constexpr std::size_t kReduceCount = std::size_t{1} << 18;
constexpr int kReduceRuns = 5;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double elapsed_us(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - since)
      .count();
}

// Position 0 of `pair` times, position 1 answers; both send and receive the same messages.
LinkSamples run_pair(CollectiveContext& pair) {
  const bool timing = pair.rank() == 0;
  const int peer = 1 - pair.rank();
  // Every message has a step of its own, so that nothing depends on the order in which a
  // transport delivers them.
  std::uint64_t step = 0;
  std::vector<std::byte> ping(kPingBytes);
  std::vector<std::byte> payload(kLargeBytes);
  LinkSamples samples;
  samples.small_bytes = static_cast<double>(kSmallBytes);
  samples.large_bytes = static_cast<double>(kLargeBytes);

  // Latency: 8 bytes there and back.
  for (int i = 0; i < kPingWarmups + kPings; ++i) {
    const auto there = step++;
    const auto back = step++;
    const auto start = std::chrono::steady_clock::now();
    if (timing) {
      pair.wait(pair.send(peer, there, ping));
      pair.wait(pair.recv(peer, back, ping));
      if (i >= kPingWarmups) samples.round_trip_us.push_back(elapsed_us(start));
    } else {
      pair.wait(pair.recv(peer, there, ping));
      pair.wait(pair.send(peer, back, ping));
    }
  }
  // Bandwidth: a message one way, 8 bytes of acknowledgement back.
  for (const std::size_t bytes : {kSmallBytes, kLargeBytes}) {
    auto& times = bytes == kSmallBytes ? samples.small_us : samples.large_us;
    const std::span<std::byte> message(payload.data(), bytes);
    for (int i = 0; i < kTransferWarmups + kTransfers; ++i) {
      const auto there = step++;
      const auto back = step++;
      const auto start = std::chrono::steady_clock::now();
      if (timing) {
        pair.wait(pair.send(peer, there, message));
        pair.wait(pair.recv(peer, back, ping));
        if (i >= kTransferWarmups) times.push_back(elapsed_us(start));
      } else {
        pair.wait(pair.recv(peer, there, message));
        pair.wait(pair.send(peer, back, ping));
      }
    }
  }
  return samples;
}

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

const char* tier_name(Tier tier) {
  switch (tier) {
    case Tier::kSameHost:
      return "same host";
    case Tier::kSameIsland:
      return "same island";
    case Tier::kOtherIsland:
      return "other island";
  }
  return "tier";
}

std::vector<ProbePair> probe_pairs(const Hierarchy& h) {
  const auto across = [&h](Tier tier, int a, int b) {
    const auto ua = static_cast<std::size_t>(a);
    const auto ub = static_cast<std::size_t>(b);
    switch (tier) {
      case Tier::kSameHost:
        return h.host[ua] == h.host[ub];
      case Tier::kSameIsland:
        return h.host[ua] != h.host[ub] && h.island[ua] == h.island[ub];
      case Tier::kOtherIsland:
        return h.island[ua] != h.island[ub];
    }
    return false;
  };
  std::vector<ProbePair> pairs;
  for (const Tier tier : {Tier::kSameHost, Tier::kSameIsland, Tier::kOtherIsland}) {
    bool found = false;
    for (int a = 0; a < h.size() && !found; ++a) {
      for (int b = a + 1; b < h.size() && !found; ++b) {
        if (across(tier, a, b)) {
          pairs.push_back({tier, a, b});
          found = true;
        }
      }
    }
  }
  return pairs;
}

std::optional<LinkCost> fit_samples(const LinkSamples& s) {
  if (s.round_trip_us.empty() || s.small_us.empty() || s.large_us.empty() ||
      !(s.large_bytes > s.small_bytes)) {
    return std::nullopt;
  }
  const double extra_us = median(s.large_us) - median(s.small_us);
  if (!(extra_us > 0) || !std::isfinite(extra_us)) return std::nullopt;
  LinkCost link;
  link.latency_us = median(s.round_trip_us) / 2;
  link.gbytes_per_s = (s.large_bytes - s.small_bytes) / (extra_us * 1e3);
  return link;
}

double reduce_us_per_gb(std::span<const double> run_us, double bytes) {
  if (run_us.empty() || !(bytes > 0)) return 0;
  return median({run_us.begin(), run_us.end()}) * (1e9 / bytes);
}

bool MeasuredCosts::empty() const {
  return !reduce_gbytes_per_s &&
         std::none_of(tiers.begin(), tiers.end(), [](const auto& t) { return t.has_value(); });
}

std::string MeasuredCosts::describe() const {
  std::string out;
  for (int t = 0; t < kTiers; ++t) {
    const auto& link = tiers[static_cast<std::size_t>(t)];
    if (!link) continue;
    out += fmt::format("{}{} {:.1f} us {:.3f} GB/s", out.empty() ? "" : "; ",
                       tier_name(static_cast<Tier>(t)), link->latency_us, link->gbytes_per_s);
  }
  if (reduce_gbytes_per_s) {
    out += fmt::format("{}reduce {:.2f} GB/s", out.empty() ? "" : "; ", *reduce_gbytes_per_s);
  }
  return out.empty() ? "nothing measured" : out;
}

ProbeValues encode_measurements(const MeasuredCosts& costs) {
  ProbeValues values{};
  for (std::size_t t = 0; t < kTiers; ++t) {
    if (!costs.tiers[t]) continue;
    values[2 * t] = costs.tiers[t]->latency_us;
    values[2 * t + 1] = 1e6 / costs.tiers[t]->gbytes_per_s;
  }
  if (costs.reduce_gbytes_per_s) values[2 * kTiers] = 1e6 / *costs.reduce_gbytes_per_s;
  return values;
}

MeasuredCosts agree_measurements(std::span<const double> all_ranks) {
  ProbeValues worst{};
  for (std::size_t i = 0; i + kProbeValues <= all_ranks.size(); i += kProbeValues) {
    for (std::size_t v = 0; v < kProbeValues; ++v) {
      const double x = all_ranks[i + v];
      // Anything not a positive finite number is "not measured" (or a hostile rank's bytes).
      if (x > 0 && std::isfinite(x)) worst[v] = std::max(worst[v], x);
    }
  }
  MeasuredCosts costs;
  for (std::size_t t = 0; t < kTiers; ++t) {
    // A tier counts once its bandwidth was measured (its latency may round to 0 on one host).
    if (worst[2 * t + 1] > 0) costs.tiers[t] = LinkCost{worst[2 * t], 1e6 / worst[2 * t + 1]};
  }
  if (worst[2 * kTiers] > 0) costs.reduce_gbytes_per_s = 1e6 / worst[2 * kTiers];
  return costs;
}

void measure_links(CollectiveContext& ctx, const Hierarchy& h, std::span<double> out) {
  MeasuredCosts mine;
  for (const auto& p : probe_pairs(h)) {
    if (ctx.rank() != p.a && ctx.rank() != p.b) continue;
    // Each tier's messages in a phase of their own: tags never meet another tier's.
    auto pair = ctx.view({p.a, p.b}, 1 + static_cast<std::uint64_t>(p.tier));
    const LinkSamples samples = run_pair(pair);
    if (ctx.rank() == p.a) mine.tiers[static_cast<std::size_t>(p.tier)] = fit_samples(samples);
  }
  const double us_per_gb = time_reduction();
  if (us_per_gb > 0) mine.reduce_gbytes_per_s = 1e6 / us_per_gb;
  const ProbeValues values = encode_measurements(mine);
  std::copy_n(values.begin(), std::min(out.size(), values.size()), out.begin());
}

}  // namespace holmes
