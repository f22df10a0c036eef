// Google Benchmark: the costs under every collective's chunk pipeline, and the rendezvous store.
//   build/bin/holmes-micro-bench --benchmark_filter='Chunk|Store'
// Chunks: 4 MiB moved between two tcp endpoints of this process over loopback, cut into chunks of
// 16 KiB ... 4 MiB with up to 4 in flight (as the collectives keep them); bytes_per_second shows
// what the per-chunk overhead costs against one 4 MiB message (the last row).
// Store: set, get, add and check round trips against a store server of this process.
#include <benchmark/benchmark.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/store_client.hpp"
#include "bootstrap/store_server.hpp"
#include "core/clock.hpp"
#include "core/status.hpp"
#include "transports/tcp/transport.hpp"

namespace {

using namespace std::chrono_literals;

// Two connected tcp endpoints (ranks 0 and 1) in this process.
struct Pair {
  std::vector<std::unique_ptr<holmes::Transport>> ends;
  Pair() {
    std::vector<std::string> addresses;
    for (int i = 0; i < 2; ++i) {
      holmes::tcp::TcpOptions options;
      options.listen_host = "127.0.0.1";
      options.token = "bench";
      options.context = "micro-bench";
      options.connect_timeout = 10s;
      ends.push_back(holmes::tcp::make_tcp_transport(options));
      addresses.push_back(ends.back()->listen_address());
    }
    for (int i = 0; i < 2; ++i) ends[i]->set_peers(i, addresses);
  }
};

void wait_ok(const holmes::CompletionPtr& c) {
  if (!c->wait_until(holmes::Deadline::after(30s)) || c->status() != HM_SUCCESS) {
    throw holmes::Error(HM_ERR_TRANSPORT, "benchmark transfer failed: " + c->message());
  }
}

void ChunkPipeline(benchmark::State& state) {
  const std::size_t total = 4 << 20;
  const auto chunk = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t kInFlight = 4;
  Pair pair;
  std::vector<std::byte> send(total, std::byte{1}), recv(total);
  std::uint64_t tag = 0;
  for (auto _ : state) {
    // Receives posted up to kInFlight chunks ahead of the sends, as the collectives do.
    std::deque<holmes::CompletionPtr> receives, sends;
    std::size_t posted = 0, sent = 0;
    const std::uint64_t base = tag;
    auto post = [&] {
      const std::size_t n = std::min(chunk, total - posted);
      receives.push_back(pair.ends[1]->irecv(0, base + posted / chunk, 0,
                                             std::span<std::byte>(recv.data() + posted, n)));
      posted += n;
    };
    while (posted < total && receives.size() < kInFlight) post();
    while (sent < total) {
      const std::size_t n = std::min(chunk, total - sent);
      sends.push_back(pair.ends[0]->isend(1, base + sent / chunk, 0,
                                          std::span<const std::byte>(send.data() + sent, n)));
      sent += n;
      if (sends.size() >= kInFlight) {
        wait_ok(sends.front());
        sends.pop_front();
      }
      if (receives.size() >= kInFlight || sent == total) {
        wait_ok(receives.front());
        receives.pop_front();
        if (posted < total) post();
      }
    }
    for (auto& r : receives) wait_ok(r);
    for (auto& s : sends) wait_ok(s);
    tag = base + total / chunk + 1;
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * total));
  state.counters["chunks"] = static_cast<double>((total + chunk - 1) / chunk);
}
BENCHMARK(ChunkPipeline)->RangeMultiplier(4)->Range(16 << 10, 4 << 20)->UseRealTime();

struct Store {
  holmes::StoreServer server{holmes::StoreServerOptions{"127.0.0.1", 0, "bench", 10s}};
  holmes::StoreClient client{"127.0.0.1", server.port(), "bench", holmes::Deadline::after(10s)};
};

void StoreSet(benchmark::State& state) {
  Store store;
  const std::string value(static_cast<std::size_t>(state.range(0)), 'v');
  int i = 0;
  for (auto _ : state) store.client.set("key" + std::to_string(i++ % 64), value);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(StoreSet)->Arg(16)->Arg(4096)->UseRealTime();

void StoreGet(benchmark::State& state) {
  Store store;
  store.client.set("key", std::string(static_cast<std::size_t>(state.range(0)), 'v'));
  for (auto _ : state) {
    benchmark::DoNotOptimize(store.client.get("key", holmes::Deadline::after(10s)));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(StoreGet)->Arg(16)->Arg(4096)->UseRealTime();

void StoreAdd(benchmark::State& state) {
  Store store;
  for (auto _ : state) benchmark::DoNotOptimize(store.client.add("counter", 1));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(StoreAdd)->UseRealTime();

void StoreCheck(benchmark::State& state) {
  Store store;
  store.client.set("key", "v");
  for (auto _ : state) benchmark::DoNotOptimize(store.client.check("key"));
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(StoreCheck)->UseRealTime();

}  // namespace
