// Per-peer transport choice in a mixed job (run under layout.sh: three hosts, two islands):
// every rank reports, through the C++ and C APIs, the transport the rules give for each peer,
// with a reason; split communicators choose the same way; and collectives across the mix of
// transports give exact results.
#include <holmes/holmes.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "check_data.hpp"
#include "core/dtype.hpp"
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

}  // namespace
}  // namespace holmes::test
