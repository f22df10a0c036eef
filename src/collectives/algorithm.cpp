#include "collectives/algorithm.hpp"

#include <array>
#include <string>

#include "collectives/registry.hpp"
#include "core/status.hpp"
#include "core/text.hpp"

namespace holmes {
namespace {

struct Named {
  Algorithm algorithm;
  std::string_view name;
};
constexpr Named kNames[] = {
    {Algorithm::kAuto, "auto"},
    {Algorithm::kRing, "ring"},
    {Algorithm::kRecursiveDoubling, "rd"},
    {Algorithm::kHalvingDoubling, "rhd"},
    {Algorithm::kTree, "tree"},
    {Algorithm::kChain, "chain"},
    {Algorithm::kPairwise, "pairwise"},
    {Algorithm::kHierarchical, "hier"},
    {Algorithm::kDissemination, "dissemination"},
    {Algorithm::kSharedMemory, "shm"},
};

struct CollectiveNamed {
  CollectiveKind kind;
  hm_collective_t public_value;
  std::string_view name;
};
constexpr CollectiveNamed kCollectives[] = {
    {CollectiveKind::kAllreduce, HM_COLL_ALLREDUCE, "allreduce"},
    {CollectiveKind::kReduceScatter, HM_COLL_REDUCE_SCATTER, "reduce_scatter"},
    {CollectiveKind::kAllgather, HM_COLL_ALLGATHER, "allgather"},
    {CollectiveKind::kBroadcast, HM_COLL_BROADCAST, "broadcast"},
    {CollectiveKind::kReduce, HM_COLL_REDUCE, "reduce"},
    {CollectiveKind::kAlltoall, HM_COLL_ALLTOALL, "alltoall"},
    {CollectiveKind::kBarrier, HM_COLL_BARRIER, "barrier"},
};

}  // namespace

const char* algorithm_name(Algorithm algorithm) {
  for (const auto& n : kNames) {
    if (n.algorithm == algorithm) return n.name.data();
  }
  return "unknown";
}

std::optional<Algorithm> algorithm_from_name(std::string_view name) {
  for (const auto& n : kNames) {
    if (n.name == name) return n.algorithm;
  }
  return std::nullopt;
}

const std::vector<Algorithm>& algorithms_for(CollectiveKind kind) {
  // The table's rows of each collective, in its order (collectives/registry.hpp).
  static const auto by_kind = [] {
    std::array<std::vector<Algorithm>, 256> out;
    for (const auto& entry : algorithm_entries()) {
      out[static_cast<std::size_t>(entry.kind)].push_back(entry.algorithm);
    }
    return out;
  }();
  return by_kind[static_cast<std::size_t>(kind)];
}

bool algorithm_applies(CollectiveKind kind, Algorithm algorithm) {
  return find_algorithm(kind, algorithm) != nullptr;
}

std::optional<CollectiveKind> collective_from_public(hm_collective_t collective) {
  for (const auto& c : kCollectives) {
    if (c.public_value == collective) return c.kind;
  }
  return std::nullopt;
}

std::optional<CollectiveKind> collective_from_name(std::string_view name) {
  for (const auto& c : kCollectives) {
    if (c.name == name) return c.kind;
  }
  return std::nullopt;
}

ForcedAlgorithms ForcedAlgorithms::parse(std::string_view text) {
  ForcedAlgorithms forced;
  text = trim(text);
  if (text.empty() || text == "auto") return forced;
  auto bad_name = [&](std::string_view name) {
    std::string valid;
    for (const auto& n : kNames) valid += (valid.empty() ? "" : ", ") + std::string(n.name);
    fail(HM_ERR_INVALID_ARGUMENT, "HOLMES_ALGO='{}': unknown algorithm '{}' (valid: {})", text,
         name, valid);
  };
  if (text.find('=') == std::string_view::npos) {
    // One name for every collective that has that algorithm.
    const auto algorithm = algorithm_from_name(text);
    if (!algorithm) bad_name(text);
    for (const auto& c : kCollectives) {
      if (algorithm_applies(c.kind, *algorithm)) forced.set(c.kind, *algorithm);
    }
    return forced;
  }
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view entry = trim(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    const auto equals = entry.find('=');
    if (equals == std::string_view::npos) {
      fail(HM_ERR_INVALID_ARGUMENT,
           "HOLMES_ALGO entry '{}' is not collective=algorithm (e.g. allreduce=ring)", entry);
    }
    const auto collective_text = trim(entry.substr(0, equals));
    const auto algorithm_text = trim(entry.substr(equals + 1));
    const auto kind = collective_from_name(collective_text);
    if (!kind) {
      fail(HM_ERR_INVALID_ARGUMENT,
           "HOLMES_ALGO entry '{}': unknown collective '{}' (valid: allreduce, reduce_scatter, "
           "allgather, broadcast, reduce, alltoall, barrier)",
           entry, collective_text);
    }
    const auto algorithm = algorithm_from_name(algorithm_text);
    if (!algorithm) bad_name(algorithm_text);
    if (*algorithm != Algorithm::kAuto && !algorithm_applies(*kind, *algorithm)) {
      fail(HM_ERR_INVALID_ARGUMENT, "HOLMES_ALGO entry '{}': {} has no algorithm '{}'", entry,
           collective_text, algorithm_text);
    }
    forced.set(*kind, *algorithm);
  }
  return forced;
}

ForcedAlgorithms ForcedAlgorithms::from_settings(const Settings& settings) {
  const auto text = settings.text_if_given(Setting::kAlgo);
  return text ? parse(*text) : ForcedAlgorithms();
}

}  // namespace holmes
