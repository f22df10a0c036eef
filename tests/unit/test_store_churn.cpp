// The store under churn: clients that connect and vanish at every stage of a connection (before
// the handshake, halfway through it, after it with half a frame sent, while parked in a GET, with
// a reset instead of a close) come and go by the hundred while a job of four clients keeps using
// the same store. The job's every value must come back right, and afterwards the server must
// hold no descriptor for any vanished client and still serve a new one.
#include <dirent.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include "eventually.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/auth.hpp"
#include "bootstrap/socket.hpp"
#include "bootstrap/store_client.hpp"
#include "bootstrap/store_protocol.hpp"
#include "bootstrap/store_server.hpp"
#include "core/clock.hpp"
#include "core/status.hpp"

namespace holmes {
namespace {

using namespace std::chrono_literals;

// Up to 10 s, looking every 20ms: the server notices vanished clients on its own thread.
template <typename Condition>
bool eventually(Condition condition) {
  return test_support::eventually(condition, 10s, 20ms);
}

using Bytes = std::vector<std::uint8_t>;

constexpr char kToken[] = "churn-token";
constexpr int kJobClients = 4;
constexpr int kJobRounds = 60;
constexpr int kChurnThreads = 2;
constexpr int kMinChurnPerThread = 200;  // vanishing clients per churn thread, at least

int open_fds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n - 1;  // opendir's own descriptor
}

// How a vanishing client leaves.
enum class Vanish {
  kAtOnce,            // connect, close
  kAfterChallenge,    // read the challenge, close
  kHalfProof,         // send half of the proof, close
  kResetInHandshake,  // read the challenge, then reset (RST) instead of a close
  kHalfFrame,         // authenticate, send a frame header and half its body, close
  kHugeFrameHeader,   // authenticate, announce a frame of kMaxFrameBytes, send 3 bytes, close
  kParkedGet,         // authenticate, GET a key nobody sets, close while parked
  kCount
};

Socket connect_raw(std::uint16_t port) {
  return Socket::connect("127.0.0.1", port, Deadline::after(10s));
}

void reset(Socket& socket) {
  const linger hard{1, 0};
  setsockopt(socket.fd(), SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  socket.close();
}

// The client's side of the handshake (bootstrap/auth.hpp) over a raw socket.
void authenticate(Socket& socket) {
  const auto deadline = Deadline::after(10s);
  std::array<std::uint8_t, auth::Challenge::kWireBytes> challenge_bytes{};
  socket.read_exact(challenge_bytes, deadline);
  auth::Challenge challenge;
  ASSERT_TRUE(auth::Challenge::decode(challenge_bytes, auth::Channel::kStore, challenge));
  auth::Proof proof;
  proof.client_nonce = auth::random_nonce();
  proof.mac = auth::compute_mac(kToken, auth::Role::kClient, auth::Channel::kStore,
                                challenge.server_nonce, proof.client_nonce, "store");
  socket.write_all(proof.encode(), deadline);
  std::array<std::uint8_t, auth::Verdict::kWireBytes> verdict_bytes{};
  socket.read_exact(verdict_bytes, deadline);
  ASSERT_TRUE(auth::Verdict::decode(verdict_bytes).accepted);
}

// One vanishing client; returns true when it proved the token (the server counts it accepted).
bool vanish(std::uint16_t port, Vanish how, int serial) {
  Socket socket = connect_raw(port);
  const auto deadline = Deadline::after(10s);
  std::array<std::uint8_t, auth::Challenge::kWireBytes> challenge{};
  switch (how) {
    case Vanish::kAtOnce:
      return false;
    case Vanish::kAfterChallenge:
      socket.read_exact(challenge, deadline);
      return false;
    case Vanish::kHalfProof:
      socket.read_exact(challenge, deadline);
      socket.write_all(Bytes(auth::Proof::kWireBytes / 2, 0x5a), deadline);
      return false;
    case Vanish::kResetInHandshake:
      socket.read_exact(challenge, deadline);
      reset(socket);
      return false;
    case Vanish::kHalfFrame: {
      authenticate(socket);
      store::Request request;
      request.op = store::Op::kSet;
      request.key = "vanished/" + std::to_string(serial);
      request.value = Bytes(100, 1);
      const Bytes frame = store::encode_request(request);
      socket.write_all(std::span(frame).first(frame.size() / 2), deadline);
      return true;
    }
    case Vanish::kHugeFrameHeader: {
      authenticate(socket);
      const auto length = static_cast<std::uint32_t>(store::kMaxFrameBytes);
      const Bytes start = {static_cast<std::uint8_t>(length),
                           static_cast<std::uint8_t>(length >> 8),
                           static_cast<std::uint8_t>(length >> 16),
                           static_cast<std::uint8_t>(length >> 24),
                           1,
                           0,
                           0};
      socket.write_all(start, deadline);
      return true;
    }
    case Vanish::kParkedGet: {
      authenticate(socket);
      store::Request request;
      request.op = store::Op::kGet;
      request.timeout_ms = 60000;
      request.key = "never/set/" + std::to_string(serial);
      socket.write_all(store::encode_request(request), deadline);
      return true;
    }
    case Vanish::kCount:
      break;
  }
  return false;
}

std::string value_of(int round, int client) {
  return "round " + std::to_string(round) + " of client " + std::to_string(client);
}

TEST(StoreChurnTest, VanishingClientsDoNotDisturbAJobNorLeakDescriptors) {
  StoreServerOptions options;
  options.host = "127.0.0.1";
  options.token = kToken;
  options.handshake_timeout = 5s;
  StoreServer server(options);
  const int fds_before = open_fds();

  std::atomic<bool> job_done{false};
  std::atomic<int> job_errors{0};
  std::atomic<int> vanished{0};
  std::atomic<int> vanished_authenticated{0};

  std::vector<std::thread> churn;
  for (int t = 0; t < kChurnThreads; ++t) {
    churn.emplace_back([&, t] {
      for (int i = 0; !job_done.load() || i < kMinChurnPerThread; ++i) {
        const auto how = static_cast<Vanish>((i + t) % static_cast<int>(Vanish::kCount));
        try {
          if (vanish(server.port(), how, t * 1000000 + i)) vanished_authenticated.fetch_add(1);
          vanished.fetch_add(1);
        } catch (const Error& e) {
          ADD_FAILURE() << "vanishing client " << i << " could not even connect: " << e.what();
          return;
        }
      }
    });
  }

  // The job: every round, each client publishes a value, reads everyone's, and bumps a counter.
  std::vector<std::thread> job;
  for (int c = 0; c < kJobClients; ++c) {
    job.emplace_back([&, c] {
      try {
        StoreClient client("127.0.0.1", server.port(), kToken, Deadline::after(10s));
        for (int round = 0; round < kJobRounds; ++round) {
          client.set("job/" + std::to_string(round) + "/" + std::to_string(c), value_of(round, c));
          for (int peer = 0; peer < kJobClients; ++peer) {
            const std::string got = client.get_string(
                "job/" + std::to_string(round) + "/" + std::to_string(peer), Deadline::after(30s));
            if (got != value_of(round, peer)) job_errors.fetch_add(1);
          }
          client.add("job/counter", 1);
        }
      } catch (const Error& e) {
        ADD_FAILURE() << "job client " << c << ": " << e.what();
        job_errors.fetch_add(1);
      }
    });
  }
  for (auto& t : job) t.join();
  job_done.store(true);
  for (auto& t : churn) t.join();

  EXPECT_EQ(job_errors.load(), 0);
  StoreClient late("127.0.0.1", server.port(), kToken, Deadline::after(10s));
  EXPECT_EQ(late.add("job/counter", 0), kJobClients * kJobRounds);
  // Churn thread 0's client 4 was a kHalfFrame: its half-sent SET must not have been applied.
  static_assert(static_cast<int>(Vanish::kHalfFrame) == 4);
  EXPECT_FALSE(late.check("vanished/4")) << "a half-sent SET was applied";
  EXPECT_GE(vanished.load(), kChurnThreads * kMinChurnPerThread);
  // Every client that proved the token is counted once: the job's, the vanished ones, `late`.
  const auto accepted = static_cast<std::uint64_t>(kJobClients + vanished_authenticated + 1);
  EXPECT_TRUE(eventually([&] { return server.accepted_connections() == accepted; }))
      << server.accepted_connections() << " accepted, expected " << accepted;
  // The server closes every vanished client's session: only `late`'s descriptors (its end and
  // the server's) remain above the count before any client came.
  EXPECT_TRUE(eventually([&] { return open_fds() == fds_before + 2; }))
      << open_fds() << " descriptors open, " << fds_before << " before any client";
  std::printf(
      "store churn: %d vanishing clients (%d after proving the token), %d job requests, "
      "%llu refused\n",
      vanished.load(), vanished_authenticated.load(), kJobClients * kJobRounds * 6,
      static_cast<unsigned long long>(server.refused_connections()));
}

}  // namespace
}  // namespace holmes
