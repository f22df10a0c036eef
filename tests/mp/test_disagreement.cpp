// Ranks that disagree on the root of a broadcast or reduce, run as real ranks (holmes-run) on the
// transport the test is registered with (HOLMES_TRANSPORT=tcp or shm). Roots that differ can
// leave every rank waiting for a message nobody sends (two ranks that each take the other, or
// itself, for the root); probes and verdicts (collectives/context.hpp, transports/matcher.hpp)
// must end every such call with HM_ERR_MISMATCH, well before the communicator's timeout, with a
// message that names this rank's root and the other side's. A rank whose own view of the call
// was served completely may succeed (a broadcast root only sends); then its data is that of the
// root it named.
#include <holmes/holmes.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "world.hpp"

namespace holmes::test {
namespace {

// Far above what finding a disagreement takes, so that a call that ends by the timeout fails
// the time bound below instead of passing as a slow mismatch.
constexpr int kTimeoutMs = 20000;
// What every rank's call may take at most: the probe's grace (150 ms), the verdicts, and room
// for a loaded machine (two cores, four ranks).
constexpr std::int64_t kBoundMs = 1500;

// A fresh world communicator (collective), destroyed at the end of the scope.
struct CComm {
  hm_comm_t handle = nullptr;
  CComm() {
    hm_config_t config = HM_CONFIG_INITIALIZER;
    config.timeout_ms = kTimeoutMs;
    EXPECT_EQ(hm_init(&config, &handle), HM_SUCCESS) << hm_last_error_message();
  }
  ~CComm() {
    if (handle != nullptr) hm_comm_destroy(handle);
  }
};

// The value a broadcast root puts at index i: tells which root a receiver's data came from.
float pattern(int root, std::size_t i) {
  return static_cast<float>(root * 1000 + static_cast<int>(i));
}

struct Case {
  hm_collective_t collective;
  hm_algorithm_t algorithm;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.collective == HM_COLL_BROADCAST ? "Broadcast_" : "Reduce_") +
         hm_algorithm_name(info.param.algorithm);
}

std::string with_root(int root) { return "with root " + std::to_string(root); }

// The root each rank names, per pattern: with two ranks, the pattern where every rank waits (for
// a broadcast each names the other, for a reduce each names itself); with four, one rank names
// another root than the three others, in patterns where some rank waits on a peer that runs the
// other call (so only a probe or a verdict can end it), for tree and chain alike. Not here: a
// reduce whose odd rank only sends (a leaf of its tree) to ranks that are done, while the root
// waits for it: nobody left in that slot can answer the root's probe (see docs/reliability.md).
std::vector<std::vector<int>> patterns(hm_collective_t collective, int size) {
  const bool broadcast = collective == HM_COLL_BROADCAST;
  if (size == 2) return {broadcast ? std::vector<int>{1, 0} : std::vector<int>{0, 1}};
  if (size == 4) {
    std::vector<std::vector<int>> all = {{0, 0, 0, 1}, {0, 1, 0, 0}, {2, 0, 0, 0}, {1, 3, 1, 1}};
    all.push_back(broadcast ? std::vector<int>{1, 0, 0, 0} : std::vector<int>{0, 3, 3, 3});
    return all;
  }
  return {};
}

// The ranks `rank` receives from in its own view of the call (root `root`), as the algorithms
// arrange them (tree.cpp, chain.cpp; the chain follows rank order on one host). The buffers are
// one chunk, so a rank sends only after it has received all it expects.
std::vector<int> senders(const Case& c, int rank, int root, int n) {
  const auto real = [&](int v) { return (v + root) % n; };
  const int v = (rank - root + n) % n;
  std::vector<int> from;
  if (c.algorithm == HM_ALGO_TREE && c.collective == HM_COLL_BROADCAST) {
    if (v != 0) from.push_back(real(v - (v & -v)));
  } else if (c.algorithm == HM_ALGO_TREE) {
    for (int mask = 1; mask < n && (v & mask) == 0; mask <<= 1) {
      if (v + mask < n) from.push_back(real(v + mask));
    }
  } else {
    // Chain: a broadcast starts at the root, a reduce at the rank after it.
    const int position = c.collective == HM_COLL_BROADCAST ? v : (v - 1 + n) % n;
    if (position != 0) from.push_back((rank - 1 + n) % n);
  }
  return from;
}

// The ranks that cannot succeed: they expect a message from a rank of the other call (which
// never sends it, or sends one with another signature), or from a rank that cannot succeed
// (which never sends it either).
std::vector<bool> must_fail(const Case& c, const std::vector<int>& roots) {
  const int n = static_cast<int>(roots.size());
  std::vector<bool> fails(roots.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < n; ++r) {
      if (fails[static_cast<std::size_t>(r)]) continue;
      for (const int p : senders(c, r, roots[static_cast<std::size_t>(r)], n)) {
        if (roots[static_cast<std::size_t>(p)] != roots[static_cast<std::size_t>(r)] ||
            fails[static_cast<std::size_t>(p)]) {
          fails[static_cast<std::size_t>(r)] = true;
          changed = true;
        }
      }
    }
  }
  return fails;
}

std::string describe(const std::vector<int>& roots) {
  std::string text = "roots";
  for (const int r : roots) text += " " + std::to_string(r);
  return text;
}

class RootDisagreementTest : public ::testing::TestWithParam<Case> {};

TEST_P(RootDisagreementTest, EveryWaitingRankGetsMismatchQuickly) {
  const Case c = GetParam();
  const int size = world().size();
  const auto all_patterns = patterns(c.collective, size);
  ASSERT_FALSE(all_patterns.empty()) << "register this test with 2 or 4 ranks";
  for (const auto& roots : all_patterns) {
    const std::string label = describe(roots);
    CComm comm;
    int rank = 0;
    hm_comm_rank(comm.handle, &rank);
    ASSERT_EQ(hm_comm_set_algorithm(comm.handle, c.collective, c.algorithm), HM_SUCCESS);
    const int root = roots[static_cast<std::size_t>(rank)];
    std::vector<float> data(256), out(256, -1.0f);
    for (std::size_t i = 0; i < data.size(); ++i) {
      data[i] = rank == root ? pattern(rank, i) : -1.0f;
    }
    const auto start = std::chrono::steady_clock::now();
    const hm_status_t status =
        c.collective == HM_COLL_BROADCAST
            ? hm_broadcast(comm.handle, data.data(), data.size(), HM_FLOAT32, root)
            : hm_reduce(comm.handle, data.data(), out.data(), data.size(), HM_FLOAT32, HM_SUM,
                        root);
    const auto took_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
    const std::string message = status == HM_SUCCESS ? "" : hm_last_error_message();

    // Nobody waits for the timeout or sees its peers vanish; a rank that cannot succeed finds
    // the disagreement.
    EXPECT_TRUE(status == HM_SUCCESS || status == HM_ERR_MISMATCH)
        << label << ": rank " << rank << " got " << hm_status_string(status) << ": " << message;
    if (must_fail(c, roots)[static_cast<std::size_t>(rank)]) {
      EXPECT_EQ(status, HM_ERR_MISMATCH) << label << ": rank " << rank;
    }
    EXPECT_LT(took_ms, kBoundMs) << label << ": rank " << rank << " took " << took_ms << " ms";
    if (status == HM_ERR_MISMATCH) {
      // This rank's view, and the peer it heard from.
      EXPECT_NE(message.find(with_root(root) + ":"), std::string::npos) << label << ": " << message;
      EXPECT_NE(message.find("rank "), std::string::npos) << label << ": " << message;
    }
    if (status == HM_SUCCESS && c.collective == HM_COLL_BROADCAST) {
      // Served completely by ranks that agree with it: the data of the root it named.
      bool from_its_root = true;
      for (std::size_t i = 0; i < data.size(); ++i) from_its_root &= data[i] == pattern(root, i);
      EXPECT_TRUE(from_its_root) << label << ": rank " << rank << " succeeded with other data";
    }
    if (status == HM_SUCCESS && c.collective == HM_COLL_REDUCE) {
      // A reduce root needs every rank's contribution, which ranks of the other call never send.
      EXPECT_NE(rank, root) << label << ": a reduce root succeeded though the ranks disagree";
    }
    // Every rank keeps the communicator until all are done: a rank that has received all it
    // expects cannot answer a probe, and one that destroyed the communicator at once would make
    // ranks still waiting on it report HM_ERR_PEER_FAILED (docs/reliability.md).
    gather_all(static_cast<std::uint64_t>(status));
    if (size == 2) {
      // Both ranks wait for each other (both must fail): each names the other's root too.
      const int other_root = roots[static_cast<std::size_t>(1 - rank)];
      EXPECT_NE(message.find(with_root(other_root)), std::string::npos) << label << ": " << message;
    }
    // Afterwards the communicator reports the failure and refuses work, as after any mismatch.
    if (status == HM_ERR_MISMATCH) {
      hm_status_t async = HM_SUCCESS;
      hm_comm_get_async_error(comm.handle, &async);
      EXPECT_EQ(async, HM_ERR_MISMATCH);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Roots, RootDisagreementTest,
                         ::testing::Values(Case{HM_COLL_BROADCAST, HM_ALGO_TREE},
                                           Case{HM_COLL_BROADCAST, HM_ALGO_CHAIN},
                                           Case{HM_COLL_REDUCE, HM_ALGO_TREE},
                                           Case{HM_COLL_REDUCE, HM_ALGO_CHAIN}),
                         case_name);

}  // namespace
}  // namespace holmes::test
