// Pinning the calling thread to one CPU for a while, as NCCL pins its init thread: the link
// probe (collectives/link_probe.cpp) runs its measuring ranks on CPUs of their own, so that the
// scheduler cannot keep two ranks that wake each other on one core (it did, in about a third of
// the probes of 6 ranks on 2 cores, and halved the rates they measured).
#pragma once

#include <sched.h>

#include <vector>

namespace holmes {

// The CPUs the calling thread may run on, in order; empty if the kernel does not say.
std::vector<int> thread_cpus();

// For its scope, the calling thread runs on the `index`-th CPU (modulo their number) of those it
// may run on; after, on all of them again. Nothing where it may run on one CPU only, or the
// kernel refuses (pinned() says which).
class PinnedToCpu {
 public:
  explicit PinnedToCpu(int index);
  ~PinnedToCpu();
  PinnedToCpu(const PinnedToCpu&) = delete;
  PinnedToCpu& operator=(const PinnedToCpu&) = delete;

  bool pinned() const { return pinned_; }
  // The CPU it runs on while pinned; -1 otherwise.
  int cpu() const { return cpu_; }
  // How many CPUs the thread could run on before (0: unknown).
  int choices() const { return choices_; }

 private:
  cpu_set_t saved_;
  bool pinned_ = false;
  int cpu_ = -1;
  int choices_ = 0;
};

}  // namespace holmes
