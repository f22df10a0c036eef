// One rank of a recovery test (shrink_test.sh): allreduces in a loop, each result checked
// exactly; at iteration --after the victim injects its fault:
//   kill    SIGKILL itself;
//   stop    SIGSTOP itself (the script wakes it once the others have recovered);
//   revoke  call revoke() instead of the allreduce (it stays alive and shrinks with the rest);
//   kill2   like kill, and --victim2 dies too, during the agreement (300 ms into its shrink);
//   grow    like kill, and after the shrink the survivors grow by one: a replacement the script
//           starts with --join takes the victim's place (its identity, at the end).
// Every rank that saw the fault then shrinks with HM_SHRINK_FAILED and checks the new
// communicator: its size, the rank order (new ranks follow the old order), and exact results of
// an allreduce and an allgather over it, --after2 times. It prints "recovered N of M ranks in X
// ms" (from the fault's stamp to the first checked allreduce) and exits 0, or exits 3 naming
// what was wrong. A victim that wakes (stop) must be refused by shrink with HM_ERR_ABORTED.
#include <holmes/holmes.hpp>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

const char* arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(system_clock::now().time_since_epoch()).count();
}

// Element e of rank r's contribution at iteration i: small integers, exact in float32 sums.
float value(int r, int i, std::size_t e) {
  return static_cast<float>((r + 1) * 3 + (i % 7) + static_cast<int>(e % 5));
}

// One allreduce over `comm` whose members are `parents` (old ranks, in order); false and a
// message when the result is not the exact sum.
bool checked_allreduce(holmes::Communicator& comm, const std::vector<int>& parents, int me, int i,
                       std::size_t count) {
  std::vector<float> data(count);
  for (std::size_t e = 0; e < count; ++e) data[e] = value(me, i, e);
  comm.allreduce(data.data(), data.data(), count, HM_FLOAT32, HM_SUM);
  for (std::size_t e = 0; e < count; ++e) {
    float want = 0;
    for (int p : parents) want += value(p, i, e);
    if (data[e] != want) {
      std::printf("rank %d: iteration %d element %zu is %g, expected %g\n", me, i, e, data[e],
                  want);
      return false;
    }
  }
  return true;
}

struct Check {
  int after2;
  std::size_t count;
  std::string stamp;
  std::string recovered_file;
  bool pause;  // stop: time for a woken victim to try its luck while the survivors work
};

// The new communicator holds `parents` (old ranks, in order; this process is `me`): its size,
// this rank's place, the order as every member sees it, and exact allreduces over it.
int check_new(holmes::Communicator& comm, const std::vector<int>& parents, int me, int old_size,
              const Check& c) {
  int expect_rank = -1;
  for (std::size_t k = 0; k < parents.size(); ++k) {
    if (parents[k] == me) expect_rank = static_cast<int>(k);
  }
  if (comm.size() != static_cast<int>(parents.size()) || comm.rank() != expect_rank) {
    std::printf("rank %d: now rank %d of %d, expected rank %d of %zu\n", me, comm.rank(),
                comm.size(), expect_rank, parents.size());
    return 3;
  }
  try {
    std::vector<std::int32_t> old_ranks(parents.size(), -1);
    const std::int32_t mine = me;
    comm.allgather(&mine, old_ranks.data(), 1, HM_INT32);
    for (std::size_t k = 0; k < parents.size(); ++k) {
      if (old_ranks[k] != parents[k]) {
        std::printf("rank %d: new rank %zu is old rank %d, expected %d\n", me, k, old_ranks[k],
                    parents[k]);
        return 3;
      }
    }
    // Ranks may have failed in different iterations (a revocation can reach one before it
    // finished the call the revoker finished): the new communicator starts its own count.
    for (int j = 0; j < c.after2; ++j) {
      if (!checked_allreduce(comm, parents, me, 1000 + j, c.count)) return 3;
      if (j == 0) {
        double fault_at = 0;
        std::ifstream(c.stamp) >> fault_at;
        std::printf("rank %d: recovered %zu of %d ranks in %.0f ms\n", me, parents.size(), old_size,
                    now_ms() - fault_at);
        std::fflush(stdout);
        if (!c.recovered_file.empty() && comm.rank() == 0) {
          std::ofstream(c.recovered_file) << "1\n";
        }
      }
      if (c.pause) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const holmes::Error& e) {
    std::printf("rank %d: on the new communicator: %s\n", me, e.what());
    return 3;
  }
  std::printf("rank %d: ok\n", me);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string fault = arg(argc, argv, "--fault", "kill");
  const int victim = std::atoi(arg(argc, argv, "--victim", "1"));
  const int victim2 = std::atoi(arg(argc, argv, "--victim2", "-1"));
  const int after = std::atoi(arg(argc, argv, "--after", "20"));
  const int after2 = std::atoi(arg(argc, argv, "--after2", "20"));
  const std::string stamp = arg(argc, argv, "--stamp", "/tmp/holmes-shrink-stamp");
  const std::string recovered_file = arg(argc, argv, "--recovered", "");
  const auto count = static_cast<std::size_t>(std::atol(arg(argc, argv, "--count", "4096")));
  bool joiner = false;
  for (int k = 1; k < argc; ++k) joiner = joiner || std::strcmp(argv[k], "--join") == 0;

  const Check c{after2, count, stamp, recovered_file, fault == "stop"};
  if (joiner) {
    // The replacement: joins the survivors' grow and takes the victim's identity.
    holmes::Communicator grown;
    try {
      grown = holmes::Communicator::join();
    } catch (const holmes::Error& e) {
      std::printf("joiner: %s\n", e.what());
      return 3;
    }
    std::vector<int> parents;
    for (int r = 0; r < grown.size(); ++r) {
      if (r != victim) parents.push_back(r);
    }
    parents.push_back(victim);
    return check_new(grown, parents, victim, grown.size(), c);
  }

  holmes::Communicator world;
  try {
    world = holmes::Communicator::init_from_env();
  } catch (const holmes::Error& e) {
    std::printf("init failed: %s\n", e.what());
    return 2;
  }
  const int rank = world.rank();
  const int size = world.size();
  std::vector<int> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(r);

  int i = 0;
  try {
    for (; i < after + 1000000; ++i) {
      if (rank == victim && i == after) {
        std::ofstream(stamp) << std::to_string(now_ms()) << "\n";
        if (fault == "revoke") {
          world.revoke();
          break;
        }
        std::fflush(stdout);
        raise(fault == "stop" ? SIGSTOP : SIGKILL);
        // stop: woken by the script after the others recovered.
      }
      if (!checked_allreduce(world, everyone, rank, i, count)) return 3;
    }
  } catch (const holmes::Error& e) {
    double fault_at = 0;
    std::ifstream(stamp) >> fault_at;
    std::printf("rank %d: %s after %.0f ms: %s\n", rank, hm_status_string(e.status()),
                now_ms() - fault_at, e.what());
    if (fault == "revoke" && e.status() != HM_ERR_ABORTED) {
      std::printf("rank %d: a revocation must end calls with HM_ERR_ABORTED\n", rank);
      return 3;
    }
  }
  std::fflush(stdout);

  if (rank == victim2) {
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      raise(SIGKILL);
    }).detach();
  }
  holmes::Communicator shrunk;
  try {
    shrunk = world.shrink({}, HM_SHRINK_FAILED);
  } catch (const holmes::Error& e) {
    std::printf("rank %d: shrink: %s: %s\n", rank, hm_status_string(e.status()), e.what());
    const bool woke = fault == "stop" && rank == victim;
    if (woke && e.status() == HM_ERR_ABORTED) {
      std::printf("rank %d: left out after waking, as expected\n", rank);
      return 0;
    }
    return 3;
  }
  if (fault == "stop" && rank == victim) {
    std::printf("rank %d: woke and was let into the shrunk communicator\n", rank);
    return 3;
  }

  // Who should be left: the victims that died (a revoker lives and stays).
  std::vector<int> parents;
  for (int r = 0; r < size; ++r) {
    const bool gone = (r == victim && fault != "revoke") || r == victim2;
    if (!gone) parents.push_back(r);
  }
  if (fault == "grow") {
    // A replacement (started by the script with --join) takes the victim's place at the end.
    try {
      shrunk = shrunk.grow(1);
    } catch (const holmes::Error& e) {
      std::printf("rank %d: grow: %s\n", rank, e.what());
      return 3;
    }
    parents.push_back(victim);
  }
  return check_new(shrunk, parents, rank, size, c);
}
