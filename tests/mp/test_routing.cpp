// Per-peer transport choice in a mixed job (run under layout.sh: three hosts, two islands):
// every rank reports, through the C++ and C APIs, the transport the rules give for each peer,
// with a reason; split communicators choose the same way; and collectives across the mix of
// transports give exact results.
#include <holmes/holmes.h>

#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "check_data.hpp"
#include "collectives/engine/nccl_engine.hpp"
#include "core/cuda/memory.hpp"
#include "core/dtype.hpp"
#include "core/log.hpp"
#include "transports/kinds.hpp"
#include "world.hpp"

namespace holmes::test {
namespace {

// The layout of layout.sh.
int host_of(int rank) { return rank / 2; }
char island_of(int rank) { return rank < 4 ? 'A' : 'B'; }

bool built(TransportKind kind) { return transport_available(kind, nullptr); }

// What the rules must choose between two ranks of that layout.
std::string expected_transport(int a, int b) {
  if (a == b) return "self";
  if (host_of(a) == host_of(b)) {
    if (built(TransportKind::kShm)) return "shm";
    return built(TransportKind::kUcx) ? "ucx" : "tcp";
  }
  if (island_of(a) == island_of(b)) {  // both islands are RDMA fabrics here
    if (built(TransportKind::kUcx)) return "ucx";
    return built(TransportKind::kVerbs) ? "verbs" : "tcp";
  }
  return "tcp";
}

// One float32 allreduce of `count` elements with `op`, out of place or in place, on the inputs
// check::fill_input makes from `seed`: how many elements of the result are wrong.
std::size_t allreduce_wrong(Communicator& comm, std::size_t count, hm_op_t op, unsigned seed,
                            bool in_place) {
  std::vector<float> send(count);
  check::fill_input(send.data(), HM_FLOAT32, op, comm.rank(), 0, count, seed);
  std::vector<float> expected(count);
  check::fill_expected(expected.data(), HM_FLOAT32, op, comm.size(), 0, count, seed);
  std::vector<float> recv(count, -1);
  float* out = in_place ? send.data() : recv.data();
  comm.allreduce(send.data(), out, count, HM_FLOAT32, op);
  return check::count_wrong(out, expected.data(), count, HM_FLOAT32);
}

TEST(RoutingTest, LayoutIsTheOneTheTestExpects) {
  ASSERT_EQ(world().size(), 6) << "run with holmes-run -n 6 -- layout.sh ...";
  const char* host = std::getenv("HOLMES_HOST");
  ASSERT_NE(host, nullptr) << "run under layout.sh";
  EXPECT_EQ(std::string(host), "h" + std::to_string(host_of(world().rank())));
}

TEST(RoutingTest, EveryPeerGetsTheTransportTheRulesGive) {
  auto& comm = world();
  const int r = comm.rank();
  for (int peer = 0; peer < comm.size(); ++peer) {
    const auto link = comm.peer_transport(peer);
    EXPECT_EQ(link.transport, expected_transport(r, peer))
        << "peer " << peer << ": " << link.reason;
    EXPECT_FALSE(link.reason.empty());
    if (peer != r && island_of(peer) != island_of(r)) {
      EXPECT_NE(link.reason.find("other island"), std::string::npos) << link.reason;
    }
  }
}

// What carries device buffers to each peer: the engine of the group the two share
// (HOLMES_GROUP_ENGINE as the environment sets it; auto: NCCL where it runs, else Holmes's staged
// ring), the lanes across islands. The C API reports the same.
TEST(RoutingTest, EveryPeerReportsItsDeviceEngine) {
  auto& comm = world();
  const int r = comm.rank();
  const char* forced = std::getenv("HOLMES_GROUP_ENGINE");
  const std::string setting = forced != nullptr && *forced != 0 ? forced : "auto";
  // This process's device memory shares through CUDA IPC wherever a device is usable.
  const bool shares = cuda_device_available();
  auto in_group = [&](int peer) -> std::string {
    if (setting == "blockwise" || setting == "ring") return setting;
    if (host_of(peer) == host_of(r) && shares && setting != "nccl") return "ipc";
    return setting != "ipc" && nccl_usable() ? "nccl" : "ring";
  };
  hm_comm_t c = nullptr;
  ASSERT_EQ(hm_init_from_env(&c), HM_SUCCESS) << hm_last_error_message();
  for (int peer = 0; peer < comm.size(); ++peer) {
    const auto link = comm.peer_transport(peer);
    const std::string expected = peer == r                         ? "self"
                                 : island_of(peer) != island_of(r) ? "lanes"
                                                                   : in_group(peer);
    EXPECT_EQ(link.engine, expected) << "peer " << peer << ": " << link.engine_reason;
    EXPECT_FALSE(link.engine_reason.empty());
    if (peer != r && island_of(peer) == island_of(r) && setting == "auto") {
      const char* level = host_of(peer) == host_of(r) ? "inside a host" : "inside an island";
      EXPECT_NE(link.engine_reason.find(level), std::string::npos) << link.engine_reason;
    }
    const char* engine = nullptr;
    const char* reason = nullptr;
    ASSERT_EQ(hm_comm_peer_engine(c, peer, &engine, &reason), HM_SUCCESS);
    EXPECT_EQ(std::string(engine), expected);
    EXPECT_EQ(std::string(reason), link.engine_reason);
  }
  const char* e = nullptr;
  const char* why = nullptr;
  EXPECT_EQ(hm_comm_peer_engine(c, -1, &e, &why), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_comm_peer_engine(c, 0, &e, nullptr), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_comm_peer_engine(nullptr, 0, &e, &why), HM_ERR_INVALID_ARGUMENT);
  hm_comm_destroy(c);
}

TEST(RoutingTest, CApiReportsTheSame) {
  hm_comm_t comm = nullptr;
  ASSERT_EQ(hm_init_from_env(&comm), HM_SUCCESS) << hm_last_error_message();
  int r = 0;
  hm_comm_rank(comm, &r);
  for (int peer = 0; peer < 6; ++peer) {
    const char* transport = nullptr;
    const char* reason = nullptr;
    ASSERT_EQ(hm_comm_peer_transport(comm, peer, &transport, &reason), HM_SUCCESS);
    EXPECT_EQ(std::string(transport), expected_transport(r, peer));
    EXPECT_GT(std::string(reason).size(), 0u);
  }
  const char* t = nullptr;
  const char* why = nullptr;
  EXPECT_EQ(hm_comm_peer_transport(comm, 6, &t, &why), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_comm_peer_transport(comm, 0, nullptr, &why), HM_ERR_INVALID_ARGUMENT);
  hm_comm_destroy(comm);
}

TEST(RoutingTest, SplitCommunicatorsChooseByTheSameRules) {
  auto& comm = world();
  const int r = comm.rank();
  // Ranks 1, 2, 4 and 5 (reversed): a communicator spanning both islands and hosts h0..h2.
  const bool member = r != 0 && r != 3;
  Communicator sub = comm.split(member ? 0 : HM_COLOR_UNDEFINED, -r);
  ASSERT_EQ(sub.valid(), member);
  if (!member) return;
  const int order[] = {5, 4, 2, 1};  // world rank of each sub rank (keys sort descending)
  EXPECT_EQ(order[sub.rank()], r);
  for (int peer = 0; peer < sub.size(); ++peer) {
    EXPECT_EQ(sub.peer_transport(peer).transport, expected_transport(r, order[peer]))
        << "sub peer " << peer;
  }
  std::int64_t mine = r;
  std::int64_t sum = 0;
  sub.allreduce(&mine, &sum, 1, HM_INT64, HM_SUM);
  EXPECT_EQ(sum, 1 + 2 + 4 + 5);
}

// Collectives over a mix of transports: exact results for large and small messages.
TEST(RoutingTest, CollectivesAcrossTheMix) {
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  for (std::size_t count : {std::size_t{1}, std::size_t{4097}, std::size_t{3} << 20}) {
    std::vector<float> send(count);
    check::fill_input(send.data(), HM_FLOAT32, HM_SUM, r, 0, count, 11);
    std::vector<float> recv(count, -1);
    std::vector<float> expected(count);
    check::fill_expected(expected.data(), HM_FLOAT32, HM_SUM, n, 0, count, 11);
    comm.allreduce(send.data(), recv.data(), count, HM_FLOAT32, HM_SUM);
    EXPECT_EQ(check::count_wrong(recv.data(), expected.data(), count, HM_FLOAT32), 0u);
    std::vector<float> gathered(count * static_cast<std::size_t>(n));
    comm.allgather(send.data(), gathered.data(), count, HM_FLOAT32);
    for (int j = 0; j < n; ++j) {
      std::vector<float> theirs(count);
      check::fill_input(theirs.data(), HM_FLOAT32, HM_SUM, j, 0, count, 11);
      EXPECT_EQ(check::count_wrong(gathered.data() + static_cast<std::size_t>(j) * count,
                                   theirs.data(), count, HM_FLOAT32),
                0u);
    }
  }
}

// UCX between two hosts of an island never moves the data through shared memory, though the
// emulated hosts share this machine (UCX would see one host and pick its shm transports): the
// lanes are network lanes, as between real hosts.
TEST(RoutingTest, UcxBetweenHostsUsesNetworkLanes) {
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  std::vector<std::int32_t> send(static_cast<std::size_t>(n), r);
  std::vector<std::int32_t> recv(static_cast<std::size_t>(n), -1);
  comm.alltoall(send.data(), recv.data(), 1, HM_INT32);  // every pair connected
  for (int peer = 0; peer < n; ++peer) EXPECT_EQ(recv[static_cast<std::size_t>(peer)], peer);
  for (int peer = 0; peer < n; ++peer) {
    if (host_of(peer) == host_of(r) || expected_transport(r, peer) != "ucx") continue;
    const auto link = comm.peer_transport(peer).link;
    EXPECT_TRUE(link.starts_with("ucx ")) << "peer " << peer << ": " << link;
    EXPECT_EQ(link.find("not connected"), std::string::npos) << "peer " << peer << ": " << link;
    for (const char* shm : {"memory", "sysv", "posix", "cma"}) {
      EXPECT_EQ(link.find(shm), std::string::npos) << "peer " << peer << ": " << link;
    }
  }
}

// The selector in the mixed job: every algorithm can be forced through the API and gives exact
// results across islands (uneven ones: 4 ranks and 2), the choice left to the cost model is the
// cheapest prediction, and small messages do not take the ring.
TEST(RoutingTest, EveryAlgorithmForcedGivesExactResultsAcrossIslands) {
  auto& comm = world();
  const int n = comm.size();
  const int r = comm.rank();
  const hm_algorithm_t allreduce_algorithms[] = {HM_ALGO_RING, HM_ALGO_RECURSIVE_DOUBLING,
                                                 HM_ALGO_HALVING_DOUBLING, HM_ALGO_HIERARCHICAL};
  for (auto algorithm : allreduce_algorithms) {
    comm.set_algorithm(HM_COLL_ALLREDUCE, algorithm);
    EXPECT_EQ(comm.query_algorithm(HM_COLL_ALLREDUCE, 1000, HM_FLOAT32).algorithm, algorithm);
    for (hm_op_t op : {HM_SUM, HM_AVG, HM_MAX}) {
      for (std::size_t count : {std::size_t{1}, std::size_t{5}, std::size_t{300001}}) {
        EXPECT_EQ(allreduce_wrong(comm, count, op, 5, false), 0u)
            << hm_algorithm_name(algorithm) << " " << count << " op " << op;
      }
    }
  }
  comm.set_algorithm(HM_COLL_ALLREDUCE, HM_ALGO_AUTO);
  for (auto algorithm : {HM_ALGO_CHAIN, HM_ALGO_TREE, HM_ALGO_HIERARCHICAL}) {
    comm.set_algorithm(HM_COLL_BROADCAST, algorithm);
    comm.set_algorithm(HM_COLL_REDUCE, algorithm);
    for (int root : {0, 3, 5}) {
      const std::size_t count = 200003;
      std::vector<std::int32_t> data(count);
      check::fill_input(data.data(), HM_INT32, HM_SUM, r == root ? root : r + 100, 0, count, 9);
      comm.broadcast(data.data(), count, HM_INT32, root);
      std::vector<std::int32_t> expected(count);
      check::fill_input(expected.data(), HM_INT32, HM_SUM, root, 0, count, 9);
      EXPECT_EQ(check::count_wrong(data.data(), expected.data(), count, HM_INT32), 0u)
          << "broadcast " << hm_algorithm_name(algorithm) << " root " << root;
      std::vector<std::int32_t> send(count);
      check::fill_input(send.data(), HM_INT32, HM_SUM, r, 0, count, 9);
      std::vector<std::int32_t> recv(count, -1);
      comm.reduce(send.data(), recv.data(), count, HM_INT32, HM_SUM, root);
      if (r == root) {
        check::fill_expected(expected.data(), HM_INT32, HM_SUM, n, 0, count, 9);
        EXPECT_EQ(check::count_wrong(recv.data(), expected.data(), count, HM_INT32), 0u)
            << "reduce " << hm_algorithm_name(algorithm) << " root " << root;
      }
    }
  }
  comm.set_algorithm(HM_COLL_BROADCAST, HM_ALGO_AUTO);
  comm.set_algorithm(HM_COLL_REDUCE, HM_ALGO_AUTO);
}

// Large hierarchical allreduces go in segments (5 of 8 MiB here) that take the phases in turn
// on their own threads: exact results across the uneven islands, out of place and in place.
TEST(RoutingTest, SegmentedHierarchicalAllreduceIsExact) {
  auto& comm = world();
  comm.set_algorithm(HM_COLL_ALLREDUCE, HM_ALGO_HIERARCHICAL);
  const std::size_t count = std::size_t{10} << 20;  // 40 MiB of float32
  for (hm_op_t op : {HM_SUM, HM_AVG}) {
    for (bool in_place : {false, true}) {
      EXPECT_EQ(allreduce_wrong(comm, count, op, 13, in_place), 0u)
          << "op " << op << " in place " << in_place;
    }
  }
  comm.set_algorithm(HM_COLL_ALLREDUCE, HM_ALGO_AUTO);
}

// Every line the library logs, kept. Added to the library's logger before main (below), when no
// library thread exists yet, and never removed: no logging thread meets a change of the logger's
// sinks.
class KeptLines final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::string> take() {
    std::lock_guard lock(mutex_);
    return std::exchange(lines_, {});
  }

 private:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    lines_.emplace_back(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}
  std::vector<std::string> lines_;
};

KeptLines& kept_lines() {
  static const auto sink = [] {
    auto made = std::make_shared<KeptLines>();
    logger().sinks().push_back(made);
    return made;
  }();
  return *sink;
}
[[maybe_unused]] const KeptLines& kKeptBeforeMain = kept_lines();

// With debug lines on, a segmented hierarchical allreduce says when this rank's lane across
// islands carried data and how long the islands worked before and after it, and at trace level
// when each phase of each segment ran: lane phases in segment order, at most the logged number of
// segments at once (the turns), every time inside the call.
TEST(RoutingTest, SegmentedHierarchicalAllreduceLogsItsTimeline) {
  auto& comm = world();
  auto& kept = kept_lines();
  kept.take();
  const auto level = logger().level();
  logger().set_level(spdlog::level::trace);
  comm.set_algorithm(HM_COLL_ALLREDUCE, HM_ALGO_HIERARCHICAL);
  const std::size_t count = std::size_t{10} << 20;  // 40 MiB of float32, as above
  EXPECT_EQ(allreduce_wrong(comm, count, HM_SUM, 17, false), 0u);
  comm.set_algorithm(HM_COLL_ALLREDUCE, HM_ALGO_AUTO);
  logger().set_level(level);

  const std::regex summary(
      R"(hierarchical allreduce of (\d+) B in (\d+) segments: ([\d.]+) ms; (.*))");
  const std::regex lane(
      R"(this rank's lane across islands ran ([\d.]+) ms of phases from ([\d.]+) to ([\d.]+) ms )"
      R"(\((\d+) segments at once at most\): ([\d.]+) ms of island work before it, ([\d.]+) ms )"
      R"(after)");
  const std::regex phase(
      R"(hierarchical allreduce segment (\d+) (.+): asked at ([\d.]+) ms, ran ([\d.]+)\.\.([\d.]+))");
  int summaries = 0;
  int segments = 0;
  double total = 0;
  bool has_lane = false;
  int window = 1;
  struct Ran {
    int segment;
    double asked, started, ended;
  };
  std::vector<Ran> lane_phases;
  std::vector<Ran> phases;
  for (const auto& line : kept.take()) {
    std::smatch m;
    if (std::regex_match(line, m, summary)) {
      ++summaries;
      EXPECT_EQ(std::stoull(m[1]), count * sizeof(float)) << line;
      segments = std::stoi(m[2]);
      total = std::stod(m[3]);
      const std::string rest = m[4];
      std::smatch l;
      if (std::regex_match(rest, l, lane)) {
        has_lane = true;
        const double busy = std::stod(l[1]), first = std::stod(l[2]), last = std::stod(l[3]);
        EXPECT_LE(first, last) << line;
        EXPECT_LE(last, total + 0.15) << line;  // the line rounds to tenths of a ms
        EXPECT_LE(busy, last - first + 0.15) << line;
        window = std::stoi(l[4]);
        EXPECT_GE(window, 1) << line;
        EXPECT_NEAR(std::stod(l[5]), first, 0.15) << line;
        EXPECT_NEAR(std::stod(l[6]), total - last, 0.15) << line;
      } else {
        EXPECT_EQ(rest, "this rank has no lane across islands");
      }
    } else if (std::regex_match(line, m, phase)) {
      const Ran ran{std::stoi(m[1]), std::stod(m[3]), std::stod(m[4]), std::stod(m[5])};
      phases.push_back(ran);
      if (m[2] == "lanes' allreduce across islands") lane_phases.push_back(ran);
    }
  }
  ASSERT_EQ(summaries, 1) << "rank " << comm.rank();
  EXPECT_GE(segments, 2);
  std::vector<int> per_segment(static_cast<std::size_t>(std::max(segments, 0)));
  for (const auto& ran : phases) {
    ASSERT_GE(ran.segment, 0);
    ASSERT_LT(ran.segment, segments);
    ++per_segment[static_cast<std::size_t>(ran.segment)];
    EXPECT_LE(ran.asked, ran.started);
    EXPECT_LE(ran.started, ran.ended);
    EXPECT_LE(ran.ended, total + 0.1);
  }
  for (int n : per_segment) EXPECT_GE(n, 2);  // at least one level's scatter and gather
  // Layout.sh's islands have 4 and 2 ranks: ranks 2 and 3 own no shard below their island.
  EXPECT_EQ(has_lane, comm.rank() != 2 && comm.rank() != 3) << "rank " << comm.rank();
  if (has_lane) {
    ASSERT_EQ(lane_phases.size(), static_cast<std::size_t>(segments));
    std::sort(lane_phases.begin(), lane_phases.end(),
              [](const Ran& a, const Ran& b) { return a.segment < b.segment; });
    for (std::size_t k = 0; k < lane_phases.size(); ++k) {
      EXPECT_EQ(lane_phases[k].segment, static_cast<int>(k)) << "a segment's lanes ran twice";
      // No more than `window` segments in the lanes' phase at once: segment k starts once
      // segment k - window has left it.
      if (k >= static_cast<std::size_t>(window)) {
        EXPECT_GE(lane_phases[k].started, lane_phases[k - window].ended - 0.01);
      }
      if (k > 0) {
        EXPECT_GE(lane_phases[k].started, lane_phases[k - 1].started) << "turns out of order";
      }
    }
  } else {
    EXPECT_TRUE(lane_phases.empty());
  }
}

TEST(RoutingTest, TheCostModelPicksItsCheapestPrediction) {
  auto& comm = world();
  for (std::size_t count : {std::size_t{1}, std::size_t{1} << 12, std::size_t{4} << 20}) {
    double cheapest = 1e300;
    for (auto algorithm : {HM_ALGO_RING, HM_ALGO_RECURSIVE_DOUBLING, HM_ALGO_HALVING_DOUBLING,
                           HM_ALGO_HIERARCHICAL}) {
      comm.set_algorithm(HM_COLL_ALLREDUCE, algorithm);
      const auto forced = comm.query_algorithm(HM_COLL_ALLREDUCE, count, HM_FLOAT32);
      EXPECT_GT(forced.predicted_us, 0.0);
      cheapest = std::min(cheapest, forced.predicted_us);
    }
    comm.set_algorithm(HM_COLL_ALLREDUCE, HM_ALGO_AUTO);
    const auto chosen = comm.query_algorithm(HM_COLL_ALLREDUCE, count, HM_FLOAT32);
    EXPECT_DOUBLE_EQ(chosen.predicted_us, cheapest) << count;
    if (count == 1) {
      EXPECT_NE(chosen.algorithm, HM_ALGO_RING) << "4 bytes over 10 ring steps";
    }
  }
  // Every rank made the same choice (the choice is part of the signature; this says it plainly).
  const auto choice = comm.query_algorithm(HM_COLL_ALLREDUCE, std::size_t{4} << 20, HM_FLOAT32);
  std::int64_t mine = choice.algorithm;
  std::int64_t low = 0;
  std::int64_t high = 0;
  comm.allreduce(&mine, &low, 1, HM_INT64, HM_MIN);
  comm.allreduce(&mine, &high, 1, HM_INT64, HM_MAX);
  EXPECT_EQ(low, high);
}

TEST(RoutingTest, CApiAlgorithmCallsCheckTheirArguments) {
  hm_comm_t comm = nullptr;
  ASSERT_EQ(hm_init_from_env(&comm), HM_SUCCESS) << hm_last_error_message();
  EXPECT_EQ(hm_comm_set_algorithm(comm, HM_COLL_BROADCAST, HM_ALGO_RING), HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hm_last_error_message()).find("broadcast has no algorithm 'ring'"),
            std::string::npos)
      << hm_last_error_message();
  EXPECT_EQ(hm_comm_set_algorithm(comm, static_cast<hm_collective_t>(99), HM_ALGO_RING),
            HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_comm_set_algorithm(comm, HM_COLL_ALLREDUCE, static_cast<hm_algorithm_t>(42)),
            HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_comm_set_algorithm(nullptr, HM_COLL_ALLREDUCE, HM_ALGO_RING),
            HM_ERR_INVALID_ARGUMENT);
  hm_algorithm_t algorithm = HM_ALGO_AUTO;
  double predicted = -1;
  ASSERT_EQ(hm_comm_set_algorithm(comm, HM_COLL_ALLREDUCE, HM_ALGO_HALVING_DOUBLING), HM_SUCCESS);
  ASSERT_EQ(
      hm_comm_query_algorithm(comm, HM_COLL_ALLREDUCE, 1024, HM_FLOAT32, &algorithm, &predicted),
      HM_SUCCESS);
  EXPECT_EQ(algorithm, HM_ALGO_HALVING_DOUBLING);
  EXPECT_GT(predicted, 0.0);
  EXPECT_EQ(hm_comm_query_algorithm(comm, HM_COLL_ALLREDUCE, 1024, static_cast<hm_dtype_t>(77),
                                    &algorithm, nullptr),
            HM_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(hm_algorithm_name(HM_ALGO_HIERARCHICAL), "hier");
  EXPECT_STREQ(hm_algorithm_name(static_cast<hm_algorithm_t>(-3)), "unknown");
  hm_comm_destroy(comm);
}

}  // namespace
}  // namespace holmes::test
