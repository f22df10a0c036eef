// Every algorithm of the algorithm table (collectives/registry.hpp) run in one process over an
// in-memory loopback transport (tests/support/loopback_transport.hpp), in Gloo's style: one test
// per (collective, algorithm, ranks), each looping over rank layouts (one host; islands
// interleaved in rank order; islands of several hosts, grouped), counts (empty, one element, odd
// sizes, several pipeline chunks; a segmented call for the hierarchical ones), dtype x op, roots,
// in place or not, and combining receives on or off. Every rank's result is checked exactly
// against a reference computed here, so a wrong block, offset or reduction shows without
// processes or sockets. The inputs are small integers, whose reductions are exact in every dtype
// (float16 and bfloat16 included), so the reference does not depend on the reduction order.
//
// Left out: the shared-memory algorithms (they need the shm transport's board: covered by
// mp.collectives.algo.shm) and the communicator's own exchanges (split, link probe).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/context.hpp"
#include "collectives/engine/group_engine.hpp"
#include "collectives/engine/two_level_engine.hpp"
#include "collectives/registry.hpp"
#include "collectives/tuning.hpp"
#include "core/dtype.hpp"
#include "core/status.hpp"
#include "loopback_transport.hpp"
#include "transports/kinds.hpp"
#include "transports/router.hpp"

namespace holmes {
namespace {

using test::LoopbackFabric;

constexpr std::size_t kChunkBytes = 4096;  // small, so that modest counts take many chunks
constexpr std::chrono::milliseconds kTimeout{20000};

// Where the ranks sit.
enum class Layout {
  kOneHost,
  kInterleavedIslands,
  kGroupedIslandsOfHosts,
  kIslandsOfThreeRankHosts,
  kOneIslandOfTwoRankHosts
};

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::kOneHost:
      return "one host";
    case Layout::kInterleavedIslands:
      return "two islands, interleaved";
    case Layout::kGroupedIslandsOfHosts:
      return "two islands of two-rank hosts, grouped";
    case Layout::kIslandsOfThreeRankHosts:
      return "two islands of three-rank hosts, grouped";
    case Layout::kOneIslandOfTwoRankHosts:
      return "one island of two-rank hosts";
  }
  return "?";
}

Hierarchy hierarchy_for(Layout layout, int n) {
  std::vector<std::string> hosts;
  std::vector<std::string> islands;
  for (int r = 0; r < n; ++r) {
    switch (layout) {
      case Layout::kOneHost:
        hosts.push_back("h");
        islands.push_back("i");
        break;
      case Layout::kInterleavedIslands:
        hosts.push_back("h" + std::to_string(r));
        islands.push_back("i" + std::to_string(r % 2));
        break;
      case Layout::kGroupedIslandsOfHosts:
        hosts.push_back("h" + std::to_string(r / 2));
        islands.push_back(r < (n + 1) / 2 ? "a" : "b");
        break;
      case Layout::kIslandsOfThreeRankHosts:
        hosts.push_back("h" + std::to_string(r / 3));
        islands.push_back(r < (n + 1) / 2 ? "a" : "b");
        break;
      case Layout::kOneIslandOfTwoRankHosts:
        hosts.push_back("h" + std::to_string(r / 2));
        islands.push_back("a");
        break;
    }
  }
  const CostModel model;
  return make_hierarchy(hosts, islands, model.shm, model.island_rdma, model.inter_island);
}

// Element i of rank r: a small integer (positive for unsigned types; for PROD, +-1 or +-2).
double input_value(hm_dtype_t dtype, hm_op_t op, int r, std::size_t i) {
  const bool is_unsigned = dtype == HM_UINT8 || dtype == HM_UINT32 || dtype == HM_UINT64;
  if (op == HM_PROD) {
    const double magnitude = (static_cast<std::size_t>(r) + i) % 3 == 0 ? 2 : 1;
    const bool negative = !is_unsigned && (static_cast<std::size_t>(r) * 3 + i) % 5 == 0;
    return negative ? -magnitude : magnitude;
  }
  if (is_unsigned) return static_cast<double>((static_cast<std::size_t>(r) * 5 + i * 3) % 13);
  return static_cast<double>((static_cast<std::size_t>(r) * 7 + i * 3) % 11) - 5;
}

// Writes `v` (exact in the dtype) as element `index` of `data`.
void put(hm_dtype_t dtype, std::byte* data, std::size_t index, double v) {
  switch (dtype) {
    case HM_INT8: {
      const auto x = static_cast<std::int8_t>(v);
      std::memcpy(data + index, &x, 1);
      return;
    }
    case HM_UINT8: {
      const auto x = static_cast<std::uint8_t>(v);
      std::memcpy(data + index, &x, 1);
      return;
    }
    case HM_INT32: {
      const auto x = static_cast<std::int32_t>(v);
      std::memcpy(data + index * 4, &x, 4);
      return;
    }
    case HM_UINT32: {
      const auto x = static_cast<std::uint32_t>(v);
      std::memcpy(data + index * 4, &x, 4);
      return;
    }
    case HM_INT64: {
      const auto x = static_cast<std::int64_t>(v);
      std::memcpy(data + index * 8, &x, 8);
      return;
    }
    case HM_UINT64: {
      const auto x = static_cast<std::uint64_t>(v);
      std::memcpy(data + index * 8, &x, 8);
      return;
    }
    case HM_FLOAT16: {
      const auto x = float_to_half(static_cast<float>(v));
      std::memcpy(data + index * 2, &x, 2);
      return;
    }
    case HM_BFLOAT16: {
      const auto x = float_to_bfloat16(static_cast<float>(v));
      std::memcpy(data + index * 2, &x, 2);
      return;
    }
    case HM_FLOAT32: {
      const auto x = static_cast<float>(v);
      std::memcpy(data + index * 4, &x, 4);
      return;
    }
    case HM_FLOAT64:
      std::memcpy(data + index * 8, &v, 8);
      return;
    default:
      FAIL() << "dtype " << dtype;
  }
}

// The reduction of element i over `n` ranks, written as element `index` of `out`. Sums,
// products, minima and maxima of the inputs are exact in every dtype; AVG divides the exact sum
// as the kernels do (integers truncate toward zero; float types divide in their own precision,
// half types in float32).
void put_reduction(hm_dtype_t dtype, hm_op_t op, int n, std::size_t i, std::byte* out,
                   std::size_t index) {
  double acc = input_value(dtype, op, 0, i);
  for (int r = 1; r < n; ++r) {
    const double v = input_value(dtype, op, r, i);
    switch (op) {
      case HM_SUM:
      case HM_AVG:
        acc += v;
        break;
      case HM_PROD:
        acc *= v;
        break;
      case HM_MIN:
        acc = std::min(acc, v);
        break;
      case HM_MAX:
        acc = std::max(acc, v);
        break;
      default:
        FAIL() << "op " << op;
    }
  }
  if (op == HM_AVG) {
    switch (dtype) {
      case HM_FLOAT32:
        return put(dtype, out, index, static_cast<float>(acc) / static_cast<float>(n));
      case HM_FLOAT64:
        return put(dtype, out, index, acc / n);
      case HM_FLOAT16:
        return put(dtype, out, index,
                   half_to_float(float_to_half(static_cast<float>(acc))) / static_cast<float>(n));
      case HM_BFLOAT16:
        return put(
            dtype, out, index,
            bfloat16_to_float(float_to_bfloat16(static_cast<float>(acc))) / static_cast<float>(n));
      default:
        return put(dtype, out, index, std::trunc(acc / n));
    }
  }
  put(dtype, out, index, acc);
}

struct Case {
  hm_dtype_t dtype;
  hm_op_t op;
};

const std::vector<Case>& reduction_cases() {
  static const std::vector<Case> cases = {
      {HM_INT32, HM_SUM},   {HM_INT32, HM_PROD},  {HM_INT32, HM_MIN},   {HM_INT32, HM_MAX},
      {HM_INT32, HM_AVG},   {HM_UINT8, HM_SUM},   {HM_INT64, HM_MAX},   {HM_FLOAT32, HM_SUM},
      {HM_FLOAT32, HM_AVG}, {HM_FLOAT64, HM_MIN}, {HM_FLOAT16, HM_SUM}, {HM_BFLOAT16, HM_SUM},
      {HM_FLOAT16, HM_AVG}, {HM_UINT32, HM_PROD},
  };
  return cases;
}

const std::vector<Case>& movement_cases() {
  static const std::vector<Case> cases = {
      {HM_UINT8, HM_SUM}, {HM_INT32, HM_SUM}, {HM_FLOAT64, HM_SUM}};
  return cases;
}

bool reduces(CollectiveKind kind) {
  return kind == CollectiveKind::kAllreduce || kind == CollectiveKind::kReduceScatter ||
         kind == CollectiveKind::kReduce;
}

// Elements of each rank's send and receive buffers for `count` (per rank where the call's count
// is per rank).
std::size_t send_elements(CollectiveKind kind, std::size_t count, int n) {
  switch (kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAlltoall:
      return count * static_cast<std::size_t>(n);
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return count;
  }
}
std::size_t recv_elements(CollectiveKind kind, std::size_t count, int n) {
  switch (kind) {
    case CollectiveKind::kAllgather:
    case CollectiveKind::kAlltoall:
      return count * static_cast<std::size_t>(n);
    case CollectiveKind::kBarrier:
      return 0;
    default:
      return count;
  }
}

// One call of `entry` on `n` ranks; checks every rank's result. `what` names the run. `engines`
// picks the engine of the hierarchical collectives' groups (nullptr: Holmes's ring).
void run_and_check(const AlgorithmEntry& entry, int n, Layout layout, std::size_t count, Case c,
                   int root, bool in_place, bool combining, const std::string& what,
                   GroupEngines* engines = nullptr) {
  const std::size_t es = dtype_size(c.dtype);
  const Hierarchy h = hierarchy_for(layout, n);
  CostModel model;
  model.chunk_bytes = static_cast<double>(kChunkBytes);
  // Each rank's router over its loopback endpoint (in the router's tcp slot, every peer routed
  // through it), as a communicator's router over its transports.
  LoopbackFabric fabric(n);
  std::vector<std::vector<std::string>> addresses(std::size(kAllTransportKinds));
  for (int r = 0; r < n; ++r) addresses[0].push_back(fmt::format("loopback:{}", r));
  const std::vector<Route> routes(static_cast<std::size_t>(n),
                                  Route{TransportKind::kTcp, "loopback"});
  std::vector<std::unique_ptr<Router>> routers;
  for (int r = 0; r < n; ++r) {
    std::vector<std::unique_ptr<Transport>> transports;
    transports.push_back(fabric.make_endpoint(r, combining));
    routers.push_back(std::make_unique<Router>(r, std::move(transports), routes, addresses));
  }

  const std::size_t sends = send_elements(entry.kind, count, n);
  const std::size_t recvs = recv_elements(entry.kind, count, n);
  // Each rank's buffers; in place, the call's send points into the receive buffer (or, for
  // reduce_scatter, the receive into the send buffer), as the C API's conventions say.
  std::vector<std::vector<std::byte>> send(static_cast<std::size_t>(n));
  std::vector<std::vector<std::byte>> recv(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto& s = send[static_cast<std::size_t>(r)];
    auto& out = recv[static_cast<std::size_t>(r)];
    s.assign(sends * es, std::byte{0});
    out.assign(recvs * es, std::byte{0x5A});  // not a valid result anywhere
    // Inputs: element i of rank r, per block for calls with a block per peer.
    for (std::size_t i = 0; i < sends; ++i) {
      put(c.dtype, s.data(), i, input_value(c.dtype, c.op, r, i));
    }
    if (entry.kind == CollectiveKind::kBroadcast) {
      if (r == root) out = s;
    }
  }

  const std::uint32_t signature = collective_signature(entry.kind, count, c.dtype, c.op, root) ^
                                  (static_cast<std::uint32_t>(entry.algorithm) * 0x9e3779b9u);
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto& s = send[static_cast<std::size_t>(r)];
      auto& out = recv[static_cast<std::size_t>(r)];
      CollectiveCall call;
      call.kind = entry.kind;
      call.count = count;
      call.dtype = c.dtype;
      call.op = c.op;
      call.root = root;
      call.send = s.data();
      call.recv = out.data();
      if (in_place && entry.kind == CollectiveKind::kAllreduce) {
        out = s;
        call.send = out.data();
      } else if (in_place && entry.kind == CollectiveKind::kReduceScatter) {
        call.recv = s.data() + static_cast<std::size_t>(r) * count * es;
      } else if (in_place && entry.kind == CollectiveKind::kAllgather && count > 0) {
        std::memcpy(out.data() + static_cast<std::size_t>(r) * count * es, s.data(), count * es);
        call.send = out.data() + static_cast<std::size_t>(r) * count * es;
      }
      if (entry.kind == CollectiveKind::kReduce && r != root) call.recv = nullptr;
      if (entry.kind == CollectiveKind::kBroadcast) call.send = nullptr;
      try {
        CollectiveResources resources;
        resources.engines = engines;
        CollectiveContext ctx(
            *routers[static_cast<std::size_t>(r)], r, n, 0, signature, kTimeout, kChunkBytes,
            OperationName{collective_name(entry.kind), 0, algorithm_name(entry.algorithm), r},
            resources);
        entry.run(ctx, h, model, call);
        if (in_place && entry.kind == CollectiveKind::kReduceScatter && count > 0) {
          std::memcpy(out.data(), call.recv, count * es);
        }
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        for (auto& router : routers) {
          router->shutdown(HM_ERR_ABORTED, e.what(), ShutdownWait::kReturnAtOnce);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(errors[static_cast<std::size_t>(r)], "") << what << ": rank " << r << " failed";
  }

  // The reference, per rank, and the first element that differs.
  std::vector<std::byte> expected(recvs * es);
  for (int r = 0; r < n; ++r) {
    if (entry.kind == CollectiveKind::kBarrier) break;
    if (entry.kind == CollectiveKind::kReduce && r != root) continue;
    for (std::size_t i = 0; i < recvs; ++i) {
      switch (entry.kind) {
        case CollectiveKind::kAllreduce:
        case CollectiveKind::kReduce:
          put_reduction(c.dtype, c.op, n, i, expected.data(), i);
          break;
        case CollectiveKind::kReduceScatter:
          put_reduction(c.dtype, c.op, n, static_cast<std::size_t>(r) * count + i, expected.data(),
                        i);
          break;
        case CollectiveKind::kAllgather:
          put(c.dtype, expected.data(), i,
              input_value(c.dtype, c.op, static_cast<int>(i / count), i % count));
          break;
        case CollectiveKind::kBroadcast:
          put(c.dtype, expected.data(), i, input_value(c.dtype, c.op, root, i));
          break;
        case CollectiveKind::kAlltoall:
          // Block q of rank r's result is block r of rank q's input.
          put(c.dtype, expected.data(), i,
              input_value(c.dtype, c.op, static_cast<int>(i / count),
                          static_cast<std::size_t>(r) * count + i % count));
          break;
        default:
          break;
      }
    }
    const auto& got = recv[static_cast<std::size_t>(r)];
    // An empty vector's data() may be null, which memcmp must never see.
    if (!expected.empty() && std::memcmp(got.data(), expected.data(), expected.size()) != 0) {
      std::size_t bad = 0;
      while (bad < recvs && std::memcmp(got.data() + bad * es, expected.data() + bad * es, es) == 0)
        ++bad;
      ADD_FAILURE() << what << ": rank " << r << " element " << bad << " of " << recvs
                    << " differs from the reference";
      return;
    }
  }
}

struct Param {
  std::size_t entry;  // index into algorithm_entries()
  int ranks;
};

std::vector<Param> all_params() {
  std::vector<Param> out;
  const auto entries = algorithm_entries();
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const auto& entry = entries[e];
    if (entry.algorithm == Algorithm::kSharedMemory) continue;
    if (entry.kind == CollectiveKind::kSplit || entry.kind == CollectiveKind::kLinkProbe) continue;
    for (int ranks : {1, 2, 3, 4, 5, 8}) out.push_back({e, ranks});
  }
  return out;
}

void PrintTo(const Param& p, std::ostream* os) {
  const auto& entry = algorithm_entries()[p.entry];
  *os << collective_name(entry.kind) << " " << algorithm_name(entry.algorithm) << " on " << p.ranks
      << " ranks";
}

class LoopbackCollectives : public ::testing::TestWithParam<Param> {};

TEST_P(LoopbackCollectives, EveryRankHoldsTheReferenceResult) {
  const auto& entry = algorithm_entries()[GetParam().entry];
  const int n = GetParam().ranks;
  const bool hierarchical = entry.algorithm == Algorithm::kHierarchical;
  std::vector<std::size_t> counts = {0, 1, 7, 1000, 5000};
  // A call large enough to go in segments whose phases overlap (4 MiB and more in all), in place
  // and not (the counts alternate).
  if (hierarchical && n >= 2 && entry.kind != CollectiveKind::kBarrier &&
      entry.kind != CollectiveKind::kAlltoall && entry.kind != CollectiveKind::kBroadcast &&
      entry.kind != CollectiveKind::kReduce) {
    const std::size_t bytes = (std::size_t{9} << 20) / 2;
    const std::size_t large = entry.kind == CollectiveKind::kAllreduce
                                  ? bytes / 4
                                  : bytes / 4 / static_cast<std::size_t>(n);
    counts.insert(counts.end(), {large, large});
  }
  if (entry.kind == CollectiveKind::kBarrier) counts = {0};
  const auto& cases = reduces(entry.kind) ? reduction_cases() : movement_cases();
  const bool rooted =
      entry.kind == CollectiveKind::kBroadcast || entry.kind == CollectiveKind::kReduce;
  for (Layout layout :
       {Layout::kOneHost, Layout::kInterleavedIslands, Layout::kGroupedIslandsOfHosts}) {
    for (std::size_t k = 0; k < counts.size(); ++k) {
      const std::size_t count = counts[k];
      const bool large = count > 100000;
      for (const Case& c : cases) {
        // The large call once per layout, as float32 sums (and moves).
        if (large && c.dtype != HM_FLOAT32 && c.dtype != HM_FLOAT64) continue;
        for (int root : rooted ? std::vector<int>{0, n - 1} : std::vector<int>{0}) {
          const bool in_place = k % 2 == 1;
          const bool combining = k % 2 == 0;
          const std::string what = fmt::format(
              "{} {} on {} ranks ({}), count {}, {} {}, root {}{}{}", collective_name(entry.kind),
              algorithm_name(entry.algorithm), n, layout_name(layout), count, dtype_name(c.dtype),
              static_cast<int>(c.op), root, in_place ? ", in place" : "",
              combining ? "" : ", combining receives refused");
          run_and_check(entry, n, layout, count, c, root, in_place, combining, what);
          if (HasFailure()) return;
        }
      }
    }
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  const auto& entry = algorithm_entries()[info.param.entry];
  return fmt::format("{}_{}_{}ranks", collective_name(entry.kind), algorithm_name(entry.algorithm),
                     info.param.ranks);
}

INSTANTIATE_TEST_SUITE_P(Table, LoopbackCollectives, ::testing::ValuesIn(all_params()), param_name);

// The hierarchical collectives composed with the blockwise group engine: each group's blocks
// reduced to their owners and broadcast from them, the decomposition the NCCL engine runs on
// NCCL's reduces and broadcasts, here on Holmes's chains, with the lanes across islands as ever.
// Every layout, count (a segmented call included), dtype and op, as the table above.
class BlockwiseEverywhere final : public GroupEngines {
 public:
  GroupEngine& for_group(const CollectiveContext& group, GroupLevel level) override {
    (void)group;
    (void)level;
    return blockwise_engine();
  }
};

class BlockwiseGroupEngine : public ::testing::TestWithParam<Param> {};

TEST_P(BlockwiseGroupEngine, EveryRankHoldsTheReferenceResult) {
  const auto& entry = algorithm_entries()[GetParam().entry];
  const int n = GetParam().ranks;
  BlockwiseEverywhere engines;
  std::vector<std::size_t> counts = {0, 1, 7, 1000, 5000};
  const std::size_t bytes = (std::size_t{9} << 20) / 2;
  counts.push_back(entry.kind == CollectiveKind::kAllreduce
                       ? bytes / 4
                       : bytes / 4 / static_cast<std::size_t>(n));
  for (Layout layout :
       {Layout::kOneHost, Layout::kInterleavedIslands, Layout::kGroupedIslandsOfHosts}) {
    for (std::size_t k = 0; k < counts.size(); ++k) {
      const std::size_t count = counts[k];
      for (const Case& c : reduces(entry.kind) ? reduction_cases() : movement_cases()) {
        if (count > 100000 && c.dtype != HM_FLOAT32) continue;
        const bool in_place = k % 2 == 1;
        const std::string what =
            fmt::format("{} hier, blockwise engine, on {} ranks ({}), count {}, {} {}{}",
                        collective_name(entry.kind), n, layout_name(layout), count,
                        dtype_name(c.dtype), static_cast<int>(c.op), in_place ? ", in place" : "");
        run_and_check(entry, n, layout, count, c, 0, in_place, true, what, &engines);
        if (HasFailure()) return;
      }
    }
  }
}

std::vector<Param> engine_params() {
  std::vector<Param> out;
  const auto entries = algorithm_entries();
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const auto& entry = entries[e];
    if (entry.algorithm != Algorithm::kHierarchical) continue;
    if (entry.kind != CollectiveKind::kAllreduce && entry.kind != CollectiveKind::kReduceScatter &&
        entry.kind != CollectiveKind::kAllgather) {
      continue;
    }
    for (int ranks : {2, 3, 4, 5, 8}) out.push_back({e, ranks});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Hierarchical, BlockwiseGroupEngine, ::testing::ValuesIn(engine_params()),
                         param_name);

// The hierarchical collectives with the two-level engine in every island whose hosts hold
// several ranks (as the communicator picks it for host buffers): every block across hosts once,
// between the ranks at its place, then inside each host. Islands of 2 hosts x 2 ranks (8 ranks),
// 3 x 2 (12) and 2 x 3 (12), and one island of 3 x 2 (6), every count (a segmented call included),
// dtype and op.
class TwoLevelWhereHostsHoldSeveral final : public GroupEngines {
 public:
  explicit TwoLevelWhereHostsHoldSeveral(Hierarchy h) : h_(std::move(h)) {}
  GroupEngine& for_group(const CollectiveContext& group, GroupLevel level) override {
    std::vector<int> host_of;
    for (int p = 0; p < group.size(); ++p) {
      host_of.push_back(h_.host[static_cast<std::size_t>(group.member(p))]);
    }
    const int per_host = two_level_ranks_per_host(host_of);
    if (level != GroupLevel::kIsland || per_host == 0) return ring_engine();
    ++two_level_calls;
    std::lock_guard lock(mutex_);  // every rank's thread asks
    auto& engine = engines_[per_host];
    if (!engine) engine = make_two_level_engine(per_host);
    return *engine;
  }
  std::atomic<int> two_level_calls{0};

 private:
  Hierarchy h_;
  std::mutex mutex_;
  std::map<int, std::unique_ptr<GroupEngine>> engines_;
};

struct TwoLevelParam {
  std::size_t entry;
  int ranks;
  Layout layout;
};

class TwoLevelGroupEngine : public ::testing::TestWithParam<TwoLevelParam> {};

TEST_P(TwoLevelGroupEngine, EveryRankHoldsTheReferenceResult) {
  const auto& entry = algorithm_entries()[GetParam().entry];
  const int n = GetParam().ranks;
  const Layout layout = GetParam().layout;
  TwoLevelWhereHostsHoldSeveral engines(hierarchy_for(layout, n));
  std::vector<std::size_t> counts = {0, 1, 7, 1000, 5000};
  counts.push_back((std::size_t{9} << 20) / 2 / 4 / static_cast<std::size_t>(n));
  for (std::size_t k = 0; k < counts.size(); ++k) {
    const std::size_t count = counts[k];
    for (const Case& c : reduces(entry.kind) ? reduction_cases() : movement_cases()) {
      if (count > 100000 && c.dtype != HM_FLOAT32) continue;
      const bool in_place = k % 2 == 1;
      const bool combining = k % 3 != 2;
      const std::string what =
          fmt::format("{} hier, two-level engine, on {} ranks ({}), count {}, {} {}{}{}",
                      collective_name(entry.kind), n, layout_name(layout), count,
                      dtype_name(c.dtype), static_cast<int>(c.op), in_place ? ", in place" : "",
                      combining ? "" : ", combining receives refused");
      run_and_check(entry, n, layout, count, c, 0, in_place, combining, what, &engines);
      if (HasFailure()) return;
    }
  }
  // The islands' phases ran on it (not the ring for want of the shape).
  EXPECT_GT(engines.two_level_calls.load(), 0);
}

std::vector<TwoLevelParam> two_level_params() {
  std::vector<TwoLevelParam> out;
  const auto entries = algorithm_entries();
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const auto& entry = entries[e];
    if (entry.algorithm != Algorithm::kHierarchical) continue;
    if (entry.kind != CollectiveKind::kReduceScatter && entry.kind != CollectiveKind::kAllgather) {
      continue;
    }
    out.push_back({e, 8, Layout::kGroupedIslandsOfHosts});
    out.push_back({e, 12, Layout::kGroupedIslandsOfHosts});
    out.push_back({e, 12, Layout::kIslandsOfThreeRankHosts});
    out.push_back({e, 6, Layout::kOneIslandOfTwoRankHosts});  // the average divides here
  }
  return out;
}

std::string two_level_name(const ::testing::TestParamInfo<TwoLevelParam>& info) {
  const auto& entry = algorithm_entries()[info.param.entry];
  const Layout layout = info.param.layout;
  return fmt::format("{}_{}ranks_{}perhost{}", collective_name(entry.kind), info.param.ranks,
                     layout == Layout::kIslandsOfThreeRankHosts ? 3 : 2,
                     layout == Layout::kOneIslandOfTwoRankHosts ? "_oneisland" : "");
}

INSTANTIATE_TEST_SUITE_P(Hierarchical, TwoLevelGroupEngine, ::testing::ValuesIn(two_level_params()),
                         two_level_name);

// A group is the engine's shape only host after host, the same number of ranks (two or more) on
// each of two hosts or more.
TEST(TwoLevelGroupEngine, TakesGroupsHostAfterHostWithSeveralRanksOnEach) {
  EXPECT_EQ(two_level_ranks_per_host(std::vector<int>{0, 0, 1, 1}), 2);
  EXPECT_EQ(two_level_ranks_per_host(std::vector<int>{4, 4, 4, 9, 9, 9}), 3);
  EXPECT_EQ(two_level_ranks_per_host(std::vector<int>{0, 0, 1, 1, 2, 2}), 2);
  EXPECT_EQ(two_level_ranks_per_host(std::vector<int>{0, 1, 2, 3}), 0);        // one rank each
  EXPECT_EQ(two_level_ranks_per_host(std::vector<int>{0, 0, 0, 0}), 0);        // one host
  EXPECT_EQ(two_level_ranks_per_host(std::vector<int>{0, 0, 1, 1, 1}), 0);     // uneven
  EXPECT_EQ(two_level_ranks_per_host(std::vector<int>{0, 0, 1, 1, 0, 0}), 0);  // host twice
  EXPECT_EQ(two_level_ranks_per_host(std::vector<int>{0, 1, 0, 1}), 0);        // interleaved
  EXPECT_EQ(two_level_ranks_per_host(std::vector<int>{}), 0);
  std::vector<int> many;
  for (int h = 0; h <= kTwoLevelMaxHosts; ++h) many.insert(many.end(), {h, h});
  EXPECT_EQ(two_level_ranks_per_host(many), 0);  // more hosts than the steps allow
  many.resize(many.size() - 2);
  EXPECT_EQ(two_level_ranks_per_host(many), 2);
}

// The loopback transport itself checks what a wire would: a receive whose sender's signature
// differs ends with HM_ERR_MISMATCH, as the matcher of the real transports does.
TEST(LoopbackTransport, DisagreeingSignaturesMismatch) {
  LoopbackFabric fabric(2);
  auto a = fabric.make_endpoint(0, true);
  auto b = fabric.make_endpoint(1, true);
  std::vector<std::byte> data(16, std::byte{1});
  std::vector<std::byte> into(16);
  auto recv = b->irecv(0, 7, 1111, into);
  auto send = a->isend(1, 7, 2222, data);
  ASSERT_TRUE(recv->wait_until(Deadline::after(std::chrono::seconds(5))));
  EXPECT_EQ(recv->status(), HM_ERR_MISMATCH) << recv->message();
}

}  // namespace
}  // namespace holmes
