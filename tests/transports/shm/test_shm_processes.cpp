// The shm transport between real processes (fork): every pair exchanges messages of every size
// through rings and by cross-memory attach, and a peer that exits or is killed with SIGKILL is
// noticed within seconds, leaving nothing in /dev/shm.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "core/status.hpp"
#include "shm_test_util.hpp"

namespace holmes::shm {
namespace {

using namespace testing;

// What one rank does once its endpoint knows its peers; returns "" or what went wrong.
using Body = std::function<std::string(int rank, int size, Transport& endpoint)>;

// Reads one line from `fd` within `timeout`; "" on EOF or timeout.
std::string read_line(int fd, std::chrono::milliseconds timeout) {
  std::string line;
  const auto deadline = Deadline::after(timeout);
  char c = 0;
  while (!deadline.expired()) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(deadline.remaining().count())) <= 0) break;
    if (read(fd, &c, 1) != 1) break;
    if (c == '\n') return line;
    line += c;
  }
  return {};
}

void write_text(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

struct Child {
  pid_t pid = -1;
  int to_child = -1;
  int from_child = -1;
};

// Waits for `pid` to exit within `timeout` (SIGKILL after); returns its wait status.
int reap(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Deadline::after(timeout);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (deadline.expired()) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(10ms);
  }
  return status;
}

// `size` ranks: this process is rank 0 (the test drives its endpoint), forked children are the
// others and run `child_body`, reporting through their exit code.
struct Job {
  std::vector<Child> children;
  std::unique_ptr<Transport> endpoint;
};

Job start_job(int size, const Body& child_body, const ShmTuning& t = tuning()) {
  Job job;
  job.children.resize(static_cast<std::size_t>(size));
  for (int r = 1; r < size; ++r) {
    int down[2];
    int up[2];
    EXPECT_EQ(pipe(down), 0);
    EXPECT_EQ(pipe(up), 0);
    const pid_t pid = fork();
    if (pid == 0) {
      close(down[1]);
      close(up[0]);
      int code = 1;
      try {
        auto endpoint = make_shm_transport(options(), t);
        write_text(up[1], endpoint->listen_address() + "\n");
        std::vector<std::string> addresses;
        for (int i = 0; i < size; ++i) addresses.push_back(read_line(down[0], 20s));
        endpoint->set_peers(r, addresses);
        const auto error = child_body(r, size, *endpoint);
        if (error.empty()) {
          code = 0;
        } else {
          std::fprintf(stderr, "rank %d: %s\n", r, error.c_str());
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stderr);
      _exit(code);  // no gtest teardown in the child; the endpoint was destroyed above
    }
    close(down[0]);
    close(up[1]);
    job.children[static_cast<std::size_t>(r)] = {pid, down[1], up[0]};
  }
  job.endpoint = make_shm_transport(options(), t);
  std::vector<std::string> addresses{job.endpoint->listen_address()};
  for (int r = 1; r < size; ++r) {
    addresses.push_back(read_line(job.children[static_cast<std::size_t>(r)].from_child, 20s));
  }
  std::string list;
  for (const auto& a : addresses) list += a + "\n";
  for (int r = 1; r < size; ++r)
    write_text(job.children[static_cast<std::size_t>(r)].to_child, list);
  job.endpoint->set_peers(0, addresses);
  return job;
}

// Reaps the children and expects them all to have succeeded.
void finish_job(Job& job) {
  for (std::size_t r = 1; r < job.children.size(); ++r) {
    const int status = reap(job.children[r].pid, 60s);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << r << " failed (wait status " << status << ")";
    close(job.children[r].to_child);
    close(job.children[r].from_child);
  }
}

std::string check(const CompletionPtr& c, const std::string& what) {
  if (!finishes(c, 30s)) return what + ": timed out";
  if (c->status() != HM_SUCCESS) return what + ": " + c->message();
  return {};
}

// Every rank sends every other rank messages of several sizes (some through the ring, some by
// cross-memory attach), half the receives posted before the sends and half after.
std::string all_to_all(int rank, int size, Transport& endpoint) {
  const std::vector<std::size_t> sizes{0, 1, 4095, 70000, (1u << 20) + 3, 16u << 20};
  auto connected = endpoint.connect_all();
  if (auto e = check(connected, "connect_all"); !e.empty()) return e;
  std::vector<std::vector<std::byte>> out;
  std::vector<std::vector<std::byte>> in;
  struct Receive {
    int peer;
    std::size_t k;      // which size
    std::size_t index;  // its buffer in `in`
    CompletionPtr request;
  };
  std::vector<Receive> recvs;
  std::vector<CompletionPtr> sends;
  // Requests point into these: no reallocation once posting starts.
  out.reserve(sizes.size() * static_cast<std::size_t>(size));
  in.reserve(sizes.size() * static_cast<std::size_t>(size));
  auto post_recvs = [&](bool first_half) {
    for (int peer = 0; peer < size; ++peer) {
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        if (peer == rank || (k % 2 == 0) != first_half) continue;
        in.emplace_back(sizes[k]);
        recvs.push_back({peer, k, in.size() - 1, endpoint.irecv(peer, k, 5, in.back())});
      }
    }
  };
  post_recvs(true);
  for (int peer = 0; peer < size; ++peer) {
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      if (peer == rank) continue;
      out.push_back(pattern(sizes[k], rank * 100 + peer * 10 + static_cast<int>(k)));
      sends.push_back(endpoint.isend(peer, k, 5, out.back()));
    }
  }
  post_recvs(false);
  for (auto& s : sends) {
    if (auto e = check(s, "send"); !e.empty()) return e;
  }
  for (auto& r : recvs) {
    if (auto e = check(r.request, fmt::format("receive from rank {}", r.peer)); !e.empty()) {
      return e;
    }
    if (in[r.index] != pattern(sizes[r.k], r.peer * 100 + rank * 10 + static_cast<int>(r.k))) {
      return fmt::format("{} bytes from rank {} arrived changed", sizes[r.k], r.peer);
    }
  }
  return {};
}

TEST(ShmProcessesTest, AllToAllOfFourProcesses) {
  for (const bool cma : {true, false}) {
    auto job = start_job(4, all_to_all, tuning(cma));
    EXPECT_EQ(all_to_all(0, 4, *job.endpoint), "") << (cma ? "with CMA" : "rings only");
    job.endpoint.reset();
    finish_job(job);
    EXPECT_EQ(segments_of(getpid()), std::vector<std::string>{});
  }
}

// Rank 1 answers one message, then waits to be killed.
std::string answer_then_hang(int rank, int size, Transport& endpoint) {
  if (auto e = check(endpoint.connect_all(), "connect_all"); !e.empty()) return e;
  std::vector<std::byte> buffer(1u << 20);
  if (auto e = check(endpoint.irecv(0, 1, 1, buffer), "receive"); !e.empty()) return e;
  if (auto e = check(endpoint.isend(0, 2, 1, buffer), "send"); !e.empty()) return e;
  std::this_thread::sleep_for(60s);  // killed long before
  return "was not killed";
}

TEST(ShmProcessesTest, KilledPeerIsDetectedWithinSeconds) {
  auto job = start_job(2, answer_then_hang);
  const pid_t child = job.children[1].pid;
  ASSERT_EQ(check(job.endpoint->connect_all(), "connect_all"), "");
  const auto sent = pattern(1u << 20, 1);
  std::vector<std::byte> back(sent.size());
  auto answer = job.endpoint->irecv(1, 2, 1, back);
  ASSERT_EQ(check(job.endpoint->isend(1, 1, 1, sent), "send"), "");
  ASSERT_EQ(check(answer, "answer"), "");
  EXPECT_TRUE(back == sent);
  // Both segments were unlinked once attached: the kill leaves nothing behind.
  EXPECT_EQ(segments_of(child), std::vector<std::string>{});

  std::vector<std::byte> never(64);
  auto pending = job.endpoint->irecv(1, 3, 1, never);
  kill(child, SIGKILL);
  const int status = reap(child, 10s);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  const auto killed = Clock::now();
  ASSERT_TRUE(finishes(pending, 5s)) << "the dead peer was not noticed";
  EXPECT_LT(Clock::now() - killed, 3s);
  EXPECT_EQ(pending->status(), HM_ERR_PEER_FAILED);
  EXPECT_NE(pending->message().find("exited without closing its shm endpoint"), std::string::npos)
      << pending->message();
  EXPECT_NE(pending->message().find(std::to_string(child)), std::string::npos)
      << pending->message();
  close(job.children[1].to_child);
  close(job.children[1].from_child);
  job.endpoint.reset();
  EXPECT_EQ(segments_of(getpid()), std::vector<std::string>{});
}

// A killed child that the launcher has not reaped yet (a zombie) counts as dead too.
TEST(ShmProcessesTest, UnreapedKilledPeerIsDetected) {
  auto job = start_job(2, answer_then_hang);
  const pid_t child = job.children[1].pid;
  ASSERT_EQ(check(job.endpoint->connect_all(), "connect_all"), "");
  std::vector<std::byte> buffer(1u << 20);  // what answer_then_hang expects
  auto answer = job.endpoint->irecv(1, 2, 1, buffer);
  ASSERT_EQ(check(job.endpoint->isend(1, 1, 1, buffer), "send"), "");
  ASSERT_EQ(check(answer, "answer"), "");
  auto pending = job.endpoint->irecv(1, 3, 1, buffer);
  kill(child, SIGKILL);
  ASSERT_TRUE(finishes(pending, 5s)) << "the dead (unreaped) peer was not noticed";
  EXPECT_EQ(pending->status(), HM_ERR_PEER_FAILED) << pending->message();
  reap(child, 10s);
  close(job.children[1].to_child);
  close(job.children[1].from_child);
}

// Rank 1 sends two messages (through the ring, and by CMA) and destroys its endpoint: rank 0
// gets both, and a receive for anything more fails as soon as it is posted.
std::string send_then_leave(int rank, int size, Transport& endpoint) {
  const auto small = pattern(300000, 7);
  const auto large = pattern(3u << 20, 8);
  auto first = endpoint.isend(0, 1, 1, small);  // done once in the ring
  if (auto e = check(endpoint.isend(0, 2, 1, large), "send"); !e.empty()) return e;
  return check(first, "send");  // the CMA one was done once rank 0 had read it
}

TEST(ShmProcessesTest, PeerThatLeavesIsNoticed) {
  auto job = start_job(2, send_then_leave);
  std::vector<std::byte> large(3u << 20);
  ASSERT_EQ(check(job.endpoint->irecv(1, 2, 1, large), "receive"), "");
  EXPECT_TRUE(large == pattern(3u << 20, 8));
  finish_job(job);
  // The ring message is still delivered after its sender has gone.
  std::vector<std::byte> received(300000);
  ASSERT_EQ(check(job.endpoint->irecv(1, 1, 1, received), "receive"), "");
  EXPECT_TRUE(received == pattern(300000, 7));
  auto more = job.endpoint->irecv(1, 2, 1, received);
  ASSERT_TRUE(finishes(more, 3s));
  EXPECT_EQ(more->status(), HM_ERR_PEER_FAILED);
  EXPECT_NE(more->message().find("closed its shm endpoint"), std::string::npos) << more->message();
}

}  // namespace
}  // namespace holmes::shm
