// The survivors' agreement on who is left out (communicator/shrink_agreement.hpp): threads play
// the ranks, each with its own connection to a real store server, arriving at different times,
// some never; every rank that takes part must end with the same set.
#include "communicator/shrink_agreement.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "bootstrap/store_server.hpp"

namespace holmes::detail {
namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "agreement-token";

class ShrinkAgreementTest : public ::testing::Test {
 protected:
  ShrinkAgreementTest() : server_(server_options()) {}

  static StoreServerOptions server_options() {
    StoreServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.token = kToken;
    return o;
  }

  struct Rank {
    int rank = 0;
    std::chrono::milliseconds arrives{0};  // when it calls decide
    std::set<int> out;                     // what it leaves out itself
    std::set<int> suspects;                // what its transports saw fail
    bool absent = false;                   // never calls decide (dead)
  };

  // Every present rank's decision of round 0 (nullopt: it threw), and how long each took.
  std::map<int, std::optional<std::set<int>>> run(const std::vector<Rank>& ranks,
                                                  std::chrono::milliseconds timeout,
                                                  std::map<int, double>* took = nullptr) {
    std::map<int, std::optional<std::set<int>>> results;
    std::map<int, double> durations;
    std::mutex mutex;
    std::vector<std::thread> threads;
    for (const Rank& r : ranks) {
      if (r.absent) continue;
      threads.emplace_back([&, r] {
        std::this_thread::sleep_for(r.arrives);
        auto store = Rendezvous::connect("127.0.0.1", server_.port(), kToken, Deadline::after(10s));
        ShrinkAgreementOptions options;
        options.prefix = "test/comm/shrink0/";
        options.rank = r.rank;
        options.size = static_cast<int>(ranks.size());
        options.timeout = timeout;
        options.grace = 100ms;
        options.poll = 2ms;
        ShrinkAgreement agreement(store, options);
        const auto start = std::chrono::steady_clock::now();
        std::optional<std::set<int>> decided;
        try {
          decided = agreement.decide(0, r.out, [&] { return r.suspects; });
        } catch (const Error&) {
        }
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
        std::lock_guard lock(mutex);
        results[r.rank] = decided;
        durations[r.rank] = ms;
      });
    }
    for (auto& t : threads) t.join();
    if (took != nullptr) *took = durations;
    return results;
  }

  static std::vector<Rank> ranks(int n) {
    std::vector<Rank> out(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)].rank = i;
    return out;
  }

  StoreServer server_;
};

TEST_F(ShrinkAgreementTest, EveryoneAliveLeavesNobodyOut) {
  const auto results = run(ranks(4), 5s);
  ASSERT_EQ(results.size(), 4u);
  for (const auto& [rank, decided] : results) {
    ASSERT_TRUE(decided.has_value()) << "rank " << rank;
    EXPECT_TRUE(decided->empty()) << "rank " << rank;
  }
}

TEST_F(ShrinkAgreementTest, ARankThatNeverComesIsLeftOutAfterTheTimeout) {
  auto r = ranks(4);
  r[2].absent = true;
  std::map<int, double> took;
  const auto results = run(r, 400ms, &took);
  ASSERT_EQ(results.size(), 3u);
  for (const auto& [rank, decided] : results) {
    ASSERT_TRUE(decided.has_value()) << "rank " << rank;
    EXPECT_EQ(*decided, std::set<int>{2}) << "rank " << rank;
  }
  // Nobody suspected it: the proposer waited the timeout for it.
  EXPECT_GE(took[0], 390.0);
}

TEST_F(ShrinkAgreementTest, ASuspectedRankGetsOnlyTheGrace) {
  auto r = ranks(4);
  r[3].absent = true;
  r[0].suspects = {3};
  r[1].suspects = {3};
  r[2].suspects = {3};
  std::map<int, double> took;
  const auto results = run(r, 10s, &took);
  for (const auto& [rank, decided] : results) {
    ASSERT_TRUE(decided.has_value()) << "rank " << rank;
    EXPECT_EQ(*decided, std::set<int>{3}) << "rank " << rank;
    EXPECT_LT(took[rank], 5000.0) << "rank " << rank << " waited for the timeout";
  }
}

TEST_F(ShrinkAgreementTest, ASuspectThatShowsUpWithinTheGraceStays) {
  auto r = ranks(3);
  r[0].suspects = {2};
  r[1].suspects = {2};
  r[2].arrives = 30ms;  // alive, a little late (it revoked; its notice was lost)
  const auto results = run(r, 10s);
  for (const auto& [rank, decided] : results) {
    ASSERT_TRUE(decided.has_value()) << "rank " << rank;
    EXPECT_TRUE(decided->empty()) << "rank " << rank;
  }
}

TEST_F(ShrinkAgreementTest, ViewsAreUnitedAndStaggeredArrivalsAgree) {
  auto r = ranks(6);
  r[5].absent = true;
  r[1].out = {4};  // rank 1 could not reach rank 4
  for (int i = 0; i < 5; ++i)
    r[static_cast<std::size_t>(i)].arrives = std::chrono::milliseconds(40 * i);
  const auto results = run(r, 600ms);
  ASSERT_EQ(results.size(), 5u);
  for (const auto& [rank, decided] : results) {
    ASSERT_TRUE(decided.has_value()) << "rank " << rank;
    EXPECT_EQ(*decided, (std::set<int>{4, 5})) << "rank " << rank;
  }
}

TEST_F(ShrinkAgreementTest, ARankThatArrivesAfterTheDecisionLearnsItWasLeftOut) {
  auto r = ranks(3);
  r[1].suspects = {2};
  r[0].suspects = {2};
  r[2].arrives = 800ms;  // frozen past the grace, then wakes
  const auto results = run(r, 10s);
  ASSERT_EQ(results.size(), 3u);
  for (const auto& [rank, decided] : results) {
    ASSERT_TRUE(decided.has_value()) << "rank " << rank;
    EXPECT_EQ(*decided, std::set<int>{2}) << "rank " << rank;
  }
}

TEST(ShrinkAgreementRanks, FormatAndParseRoundTripAndRefuseGarbage) {
  EXPECT_EQ(ShrinkAgreement::format_ranks({}), "");
  EXPECT_EQ(ShrinkAgreement::format_ranks({7, 1, 4}), "1 4 7");
  EXPECT_EQ(ShrinkAgreement::parse_ranks("1 4 7", 8, "x"), (std::set<int>{1, 4, 7}));
  EXPECT_EQ(ShrinkAgreement::parse_ranks("", 8, "x"), std::set<int>{});
  for (const char* bad : {"8", "-1", "1x", "a", "1,2", "99999999999999999999"}) {
    try {
      ShrinkAgreement::parse_ranks(bad, 8, "the view of rank 3");
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), HM_ERR_TRANSPORT);
      EXPECT_NE(std::string(e.what()).find("the view of rank 3"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace holmes::detail
