// Helpers the shm transport tests share: endpoints and jobs in one process, message patterns,
// bounded waits, and a look into /dev/shm for segments this process left behind.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "transports/options.hpp"
#include "transports/shm/transport.hpp"
#include "transports/transport.hpp"

namespace holmes::shm::testing {

using namespace std::chrono_literals;

inline TransportOptions options(const std::string& token = "secret",
                                const std::string& context = "test/world0") {
  TransportOptions o;
  o.token = token;
  o.context = context;
  o.connect_timeout = 5s;
  return o;
}

inline ShmTuning tuning(bool cma = true, std::uint64_t ring_bytes = 2u << 20) {
  ShmTuning t;
  t.cma = cma;
  t.ring_bytes = ring_bytes;
  return t;
}

inline std::unique_ptr<Transport> endpoint(const ShmTuning& t = tuning(),
                                           const std::string& token = "secret",
                                           const std::string& context = "test/world0") {
  return make_shm_transport(options(token, context), t);
}

// `n` endpoints of one communicator that know each other.
inline std::vector<std::unique_ptr<Transport>> job(int n, const ShmTuning& t = tuning(),
                                                   const std::string& context = "test/world0") {
  std::vector<std::unique_ptr<Transport>> all;
  std::vector<std::string> addresses;
  for (int i = 0; i < n; ++i) {
    all.push_back(endpoint(t, "secret", context));
    addresses.push_back(all.back()->listen_address());
  }
  for (int i = 0; i < n; ++i) all[static_cast<std::size_t>(i)]->set_peers(i, addresses);
  return all;
}

inline std::vector<std::byte> pattern(std::size_t bytes, int seed) {
  std::vector<std::byte> data(bytes);
  // xorshift64, eight bytes per step: every byte depends on its position and the seed, and 1 GiB
  // is made in well under a second.
  std::uint64_t x =
      0x9e3779b97f4a7c15ull ^ (static_cast<std::uint64_t>(seed) * 0x2545f4914f6cdd1dull);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(data.data() + i, &x, 8);
  }
  for (; i < bytes; ++i) data[i] = static_cast<std::byte>((x >> (8 * (i % 8))) ^ i);
  return data;
}

inline bool finishes(const CompletionPtr& c, std::chrono::milliseconds within = 20s) {
  return c->wait_until(Deadline::after(within));
}

// Names in /dev/shm that look like segments of process `pid` (names carry their creator's pid).
inline std::vector<std::string> segments_of(pid_t pid) {
  std::vector<std::string> out;
  const std::string marker = "-" + std::to_string(pid) + "-";
  if (DIR* dir = opendir("/dev/shm")) {
    while (const dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.rfind("holmes-", 0) == 0 && name.find(marker) != std::string::npos) {
        out.push_back(name);
      }
    }
    closedir(dir);
  }
  return out;
}

}  // namespace holmes::shm::testing
