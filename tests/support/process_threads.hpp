// The threads of this process, by kernel id, for tests that check nothing outlives its owner.
//
// Counting /proc/self/task entries is not enough: a thread whose join has returned can still be
// listed for a moment (the kernel wakes the joiner before it unhashes the task), so a baseline
// taken just after a communicator was destroyed may include a thread that is already leaving.
// Comparing sets instead asks the real question (did a thread appear that is still there?), and
// a baseline thread that ends later is not reported as a leak, nor does it hide one.
#pragma once

#include <dirent.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <string>
#include <thread>

namespace holmes::test {

inline std::set<long> thread_ids() {
  std::set<long> ids;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return ids;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ids.insert(std::stol(entry->d_name));
  }
  closedir(dir);
  return ids;
}

// Threads alive now that were not in `before`, after waiting up to `patience` for them to go
// (a thread that has returned may still be listed until the kernel reaps it).
inline std::set<long> threads_started_since(
    const std::set<long>& before,
    std::chrono::milliseconds patience = std::chrono::milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    std::set<long> extra;
    for (const long id : thread_ids()) {
      if (!before.contains(id)) extra.insert(id);
    }
    if (extra.empty() || std::chrono::steady_clock::now() >= deadline) return extra;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// "123 (name), 456 (name)": which threads, for a failure message.
inline std::string describe_threads(const std::set<long>& ids) {
  std::string out;
  for (const long id : ids) {
    std::string name = "?";
    if (FILE* f = std::fopen(("/proc/self/task/" + std::to_string(id) + "/comm").c_str(), "r")) {
      char buffer[64] = {0};
      if (std::fgets(buffer, sizeof buffer, f) != nullptr) {
        name = buffer;
        if (!name.empty() && name.back() == '\n') name.pop_back();
      }
      std::fclose(f);
    }
    if (!out.empty()) out += ", ";
    out += std::to_string(id) + " (" + name + ")";
  }
  return out;
}

}  // namespace holmes::test
