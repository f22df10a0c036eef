#include "core/thread_affinity.hpp"

#include <pthread.h>

namespace holmes {
namespace {

std::vector<int> cpus_of(const cpu_set_t& set) {
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

}  // namespace

std::vector<int> thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0) return {};
  return cpus_of(set);
}

PinnedToCpu::PinnedToCpu(int index) {
  CPU_ZERO(&saved_);
  if (pthread_getaffinity_np(pthread_self(), sizeof saved_, &saved_) != 0) return;
  const std::vector<int> cpus = cpus_of(saved_);
  choices_ = static_cast<int>(cpus.size());
  if (cpus.size() < 2 || index < 0) return;
  cpu_set_t one;
  CPU_ZERO(&one);
  const int cpu = cpus[static_cast<std::size_t>(index) % cpus.size()];
  CPU_SET(cpu, &one);
  if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0) return;
  pinned_ = true;
  cpu_ = cpu;
}

PinnedToCpu::~PinnedToCpu() {
  if (pinned_) pthread_setaffinity_np(pthread_self(), sizeof saved_, &saved_);
}

}  // namespace holmes
