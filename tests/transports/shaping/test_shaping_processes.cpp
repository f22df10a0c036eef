// The shaping layer in a running job: 4 ranks under holmes-run and two_hosts.sh, two emulated
// hosts (two-hosts.yaml: 1 Gbit/s between them, scale 10, 2 ranks per host: 6.25 MB/s per
// rank). Checks that the links to the other host say they are shaped (and those inside a host
// do not), that transfers across hosts take at least the time the shaped rate allows, that
// results stay exact, and that split communicators are shaped the same way. With
// HOLMES_SHAPING=0 no link is shaped. Timings are printed; only lower bounds are asserted.
#include <holmes/holmes.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace holmes {
namespace {

constexpr std::size_t kBytes = 4u << 20;
// two-hosts.yaml: eth-1 is 1 Gbit/s with 200 us; scale 10; 2 ranks per host.
constexpr double kRankRate = 1e9 / 8 / 10 / 2;  // bytes/s: one rank's share of its host's NIC
constexpr double kHostRate = 2 * kRankRate;
const char* const kShapedLink =
    "shaped to 0.05 Gbit/s + 200 us (link class eth-1: 1 Gbit/s x 1 "
    "NIC / scale 10 / 2 ranks of shape-";

std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> comm;
  return comm;
}
Communicator& world() { return *world_slot(); }

bool shaping_expected() {
  const char* v = std::getenv("HOLMES_SHAPING");
  return v == nullptr || std::string(v) != "0";
}

int host_of(int rank) { return rank / 2; }

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A pattern that differs per sender and per byte position.
std::vector<unsigned char> pattern(int sender, std::size_t bytes) {
  std::vector<unsigned char> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i) {
    out[i] = static_cast<unsigned char>((i * 131 + (i >> 12) * 7 + sender * 29) & 0xff);
  }
  return out;
}

std::vector<std::uint64_t> gather_all(Communicator& comm, std::uint64_t x) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
  comm.allgather(&x, all.data(), 1, HM_UINT64);
  return all;
}

std::uint64_t now_ns() {
  // steady_clock is CLOCK_MONOTONIC, the same in every process of this machine.
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

TEST(ShapingProcessesTest, LayoutIsTheOneTheTestExpects) {
  ASSERT_EQ(world().size(), 4) << "run with holmes-run -n 4 -- two_hosts.sh ...";
  const char* host = std::getenv("HOLMES_HOST");
  ASSERT_NE(host, nullptr) << "run under two_hosts.sh";
  EXPECT_EQ(std::string(host), "shape-" + std::to_string(host_of(world().rank())));
}

TEST(ShapingProcessesTest, LinksToTheOtherHostSayTheyAreShaped) {
  const int r = world().rank();
  for (int peer = 0; peer < world().size(); ++peer) {
    if (peer == r) continue;
    const std::string link = world().peer_transport(peer).link;
    if (shaping_expected() && host_of(peer) != host_of(r)) {
      EXPECT_NE(link.find(kShapedLink + std::to_string(host_of(r)) + ")"), std::string::npos)
          << "peer " << peer << ": " << link;
    } else {
      EXPECT_EQ(link.find("shaped"), std::string::npos) << "peer " << peer << ": " << link;
    }
  }
}

// Ranks 0 -> 2 and 1 -> 3 at once (across the hosts), or 0 -> 1 and 2 -> 3 (inside them).
void exchange(Communicator& comm, bool across, const char* what) {
  const int r = comm.rank();
  const int partner = across ? (r + 2) % 4 : (r ^ 1);
  const bool sender = across ? r < 2 : r % 2 == 0;
  comm.barrier();
  const auto start = Clock::now();
  if (sender) {
    const auto data = pattern(r, kBytes);
    comm.send(data.data(), kBytes, HM_UINT8, partner);
    const double elapsed = seconds_since(start);
    std::printf("%s: 4 MiB to rank %d in %.3f s (%.2f MB/s)\n", what, partner, elapsed,
                kBytes / elapsed / 1e6);
    if (across && shaping_expected()) {
      EXPECT_GE(elapsed, kBytes / kRankRate) << "faster than the shaped rate allows";
    }
  } else {
    std::vector<unsigned char> got(kBytes, 0);
    comm.recv(got.data(), kBytes, HM_UINT8, partner);
    EXPECT_TRUE(got == pattern(partner, kBytes)) << "data from rank " << partner << " differs";
  }
  comm.barrier();
}

TEST(ShapingProcessesTest, SendAcrossHostsIsHeldToTheShapedRate) {
  exchange(world(), true, "across hosts");
}

TEST(ShapingProcessesTest, SendInsideAHostIsNotShaped) {
  exchange(world(), false, "inside a host");
}

TEST(ShapingProcessesTest, AllreduceAcrossHostsIsExactAndHeldToTheHostsRate) {
  Communicator& comm = world();
  const int r = comm.rank();
  const std::size_t count = kBytes / sizeof(std::int32_t);
  std::vector<std::int32_t> data(count);
  for (std::size_t i = 0; i < count; ++i) {
    data[i] = static_cast<std::int32_t>((i * 7 + static_cast<std::size_t>(r) * 13) % 100003);
  }
  comm.barrier();
  const std::uint64_t start = now_ns();
  comm.allreduce(data.data(), data.data(), count, HM_INT32, HM_SUM);
  const std::uint64_t end = now_ns();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    std::int64_t expected = 0;
    for (int k = 0; k < comm.size(); ++k) {
      expected += static_cast<std::int64_t>((i * 7 + static_cast<std::size_t>(k) * 13) % 100003);
    }
    wrong += data[i] != expected ? 1 : 0;
  }
  EXPECT_EQ(wrong, 0u);
  // Every rank's result depends on the other host's 4 MiB sum, which leaves that host through
  // its 2 ranks' shares: at least 4 MiB / (2 x 6.25 MB/s) from the first start to the last end.
  const auto starts = gather_all(comm, start);
  const auto ends = gather_all(comm, end);
  const double span = static_cast<double>(*std::max_element(ends.begin(), ends.end()) -
                                          *std::min_element(starts.begin(), starts.end())) /
                      1e9;
  if (r == 0) std::printf("allreduce of 4 MiB (int32) over 4 ranks: %.3f s\n", span);
  if (shaping_expected()) {
    EXPECT_GE(span, kBytes / kHostRate);
  }
}

TEST(ShapingProcessesTest, SplitCommunicatorsAreShapedTheSameWay) {
  // Ranks 0 and 2, 1 and 3: one rank of each host; the host's NICs are still shared by 2 ranks.
  const int r = world().rank();
  Communicator pair = world().split(r % 2, r);
  ASSERT_TRUE(pair.valid());
  ASSERT_EQ(pair.size(), 2);
  const int peer = 1 - pair.rank();
  const std::string link = pair.peer_transport(peer).link;
  if (shaping_expected()) {
    EXPECT_NE(link.find(kShapedLink + std::to_string(host_of(r)) + ")"), std::string::npos) << link;
  } else {
    EXPECT_EQ(link.find("shaped"), std::string::npos) << link;
  }
  constexpr std::size_t kSplitBytes = 1u << 20;
  pair.barrier();
  const auto start = Clock::now();
  if (pair.rank() == 0) {
    const auto data = pattern(r, kSplitBytes);
    pair.send(data.data(), kSplitBytes, HM_UINT8, peer);
    const double elapsed = seconds_since(start);
    std::printf("split: 1 MiB to the other host in %.3f s\n", elapsed);
    if (shaping_expected()) {
      EXPECT_GE(elapsed, kSplitBytes / kRankRate);
    }
  } else {
    std::vector<unsigned char> got(kSplitBytes, 0);
    pair.recv(got.data(), kSplitBytes, HM_UINT8, peer);
    EXPECT_TRUE(got == pattern(r - 2, kSplitBytes));
  }
  pair.barrier();
}

}  // namespace
}  // namespace holmes

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  try {
    holmes::world_slot() =
        std::make_unique<holmes::Communicator>(holmes::Communicator::init_from_env());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "init failed: %s\n", e.what());
    return 1;
  }
  const int result = RUN_ALL_TESTS();
  holmes::world_slot().reset();
  return result;
}
