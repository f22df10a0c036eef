// One rank of a fault-injection job (faults_test.sh, link_down_test.sh): every rank runs
// allreduces in a loop; the victim rank injects its fault at iteration --after: SIGKILL itself
// (kill), SIGSTOP itself (stop: it freezes), or nothing (none). Before the fault it writes the
// time into --stamp, so the survivors can say how long detection took. With --fault external the
// fault comes from outside (the test script takes a link down and writes the stamp itself); rank
// 0 creates the file --ready once it has finished --after iterations, so the script strikes
// while every rank is busy. A rank whose call fails prints one line,
//   "rank R: STATUS after MS ms: MESSAGE"
// and exits 0 when the status is one of --expect (a comma-separated list) and the call failed
// within --bound-ms of the fault, 3 otherwise. With --fault none every rank must finish all
// iterations (exit 0). --count sets the float32 elements of each allreduce (default 1024).
#include <holmes/holmes.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

// True when `status` is one of the comma-separated names in `expected`.
bool is_expected(const std::string& expected, const char* status) {
  std::istringstream names(expected);
  std::string name;
  while (std::getline(names, name, ',')) {
    if (name == status) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string fault = arg(argc, argv, "--fault", "none");
  const int victim = std::atoi(arg(argc, argv, "--victim", "1"));
  const int after = std::atoi(arg(argc, argv, "--after", "20"));
  const int iterations = std::atoi(arg(argc, argv, "--iterations", "100000"));
  const double bound_ms = std::atof(arg(argc, argv, "--bound-ms", "5000"));
  const std::string stamp = arg(argc, argv, "--stamp", "/tmp/holmes-fault-stamp");
  const std::string expect = arg(argc, argv, "--expect", "HM_ERR_PEER_FAILED");
  const std::string ready = arg(argc, argv, "--ready", "");
  const long count = std::atol(arg(argc, argv, "--count", "1024"));  // float32 per allreduce
  if (count < 1) {
    std::printf("--count must be a positive number of elements\n");
    return 2;
  }
  const bool self_inflicted = fault == "kill" || fault == "stop";

  hm_comm_t world = nullptr;
  if (const hm_status_t status = hm_init_from_env(&world); status != HM_SUCCESS) {
    std::printf("init failed: %s: %s\n", hm_status_string(status), hm_last_error_message());
    return 2;
  }
  int rank = 0;
  hm_comm_rank(world, &rank);
  std::vector<float> data(static_cast<std::size_t>(count), 1.0f);
  for (int i = 0; i < iterations; ++i) {
    if (rank == 0 && i == after && !ready.empty()) std::ofstream(ready) << i << "\n";
    if (rank == victim && i == after && self_inflicted) {
      std::ofstream(stamp) << std::to_string(now_ms()) << "\n";
      std::fflush(stdout);
      raise(fault == "kill" ? SIGKILL : SIGSTOP);
    }
    const hm_status_t status =
        hm_allreduce(world, data.data(), data.data(), data.size(), HM_FLOAT32, HM_SUM);
    if (status != HM_SUCCESS) {
      const double at = now_ms();
      double fault_at = 0;
      std::ifstream(stamp) >> fault_at;
      const double elapsed = fault_at > 0 ? at - fault_at : -1;
      std::printf("rank %d: %s after %.0f ms: %s\n", rank, hm_status_string(status), elapsed,
                  hm_last_error_message());
      std::fflush(stdout);
      const bool ok =
          is_expected(expect, hm_status_string(status)) && elapsed >= 0 && elapsed <= bound_ms;
      hm_comm_destroy(world);
      return ok ? 0 : 3;
    }
    for (float& v : data) v = 1.0f;
  }
  std::printf("rank %d: finished %d iterations\n", rank, iterations);
  hm_comm_destroy(world);
  return fault == "none" ? 0 : 3;
}
