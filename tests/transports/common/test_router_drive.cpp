// Which transports a router's caller drives (Router::begin_caller_drive) and polls while it
// waits (Router::caller_progress): the sole carrier; every carrier when there are several and
// each one's waiters poll (tcp and shm); none when a carrier's waiters would sleep without
// polling the others (ucx, verbs) or when links are shaped. Fake transports count the calls.
// The router finds a transport's drive through its CallerDrive capability (capabilities.hpp).
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transports/router.hpp"

namespace holmes {
namespace {

class CountingProgress final : public Progress {
 public:
  void start_polling() override { ++starts; }
  void poll(const Completion*) override { ++polls; }
  void stop_polling(bool satisfied) override { ++(satisfied ? satisfied_stops : sleeping_stops); }
  int starts = 0, polls = 0, satisfied_stops = 0, sleeping_stops = 0;
};

// A transport that moves nothing: it counts drives, and its waiters poll when it has progress.
class FakeTransport final : public Transport, public CallerDrive {
 public:
  explicit FakeTransport(bool waiters_poll) : waiters_poll_(waiters_poll) {}

  const char* name() const override { return "fake"; }
  std::string listen_address() const override { return "fake"; }
  void set_peers(int, std::vector<std::string>) override {}
  CompletionPtr connect_all() override { return done(); }
  CompletionPtr isend(int, std::uint64_t, std::uint32_t, std::span<const std::byte>) override {
    return done();
  }
  CompletionPtr irecv(int, std::uint64_t, std::uint32_t, std::span<std::byte>) override {
    return done();
  }
  void shutdown(hm_status_t, const std::string&, ShutdownWait) override {}
  LinkProperties link(int) const override { return {"fake", "fake", 0, 0}; }
  void fail_peer(int, hm_status_t, const std::string&) override {}
  void set_peer_failure_listener(PeerFailureListener) override {}
  void set_arrival_listener(ArrivalListener) override {}
  void begin_caller_drive() override { ++begins; }
  void end_caller_drive() override { ++ends; }
  Progress* caller_progress() override { return waiters_poll_ ? &progress : nullptr; }
  std::chrono::microseconds yield_before_sleep(int) const override {
    return std::chrono::microseconds(0);
  }

  CountingProgress progress;
  int begins = 0, ends = 0;

 private:
  static CompletionPtr done() {
    auto c = std::make_shared<Completion>();
    c->complete();
    return c;
  }
  bool waiters_poll_;
};

struct Fakes {
  FakeTransport* tcp = nullptr;
  FakeTransport* shm = nullptr;
  FakeTransport* ucx = nullptr;
};

// A router for rank 0 of `kinds.size()` ranks (kinds[0], rank 0's own route, is not used),
// with fake tcp and shm transports whose waiters poll and a fake ucx whose waiters do not.
std::unique_ptr<Router> make_router(const std::vector<TransportKind>& kinds, Fakes& fakes) {
  std::vector<std::unique_ptr<Transport>> transports(std::size(kAllTransportKinds));
  auto add = [&](TransportKind kind, bool waiters_poll) {
    auto t = std::make_unique<FakeTransport>(waiters_poll);
    FakeTransport* raw = t.get();
    transports[static_cast<std::size_t>(kind)] = std::move(t);
    return raw;
  };
  fakes.tcp = add(TransportKind::kTcp, true);
  fakes.shm = add(TransportKind::kShm, true);
  fakes.ucx = add(TransportKind::kUcx, false);
  std::vector<Route> routes;
  for (TransportKind kind : kinds) routes.push_back({kind, "test"});
  const std::vector<std::vector<std::string>> addresses(std::size(kAllTransportKinds),
                                                        std::vector<std::string>(kinds.size()));
  return std::make_unique<Router>(0, std::move(transports), std::move(routes), addresses);
}

// One drive as a collective makes it: begin, a wait that polls twice and then sleeps, end.
void drive_once(Router& router) {
  router.begin_caller_drive();
  if (Progress* p = router.caller_progress()) {
    p->start_polling();
    p->poll(nullptr);
    p->poll(nullptr);
    p->stop_polling(false);
  }
  router.end_caller_drive();
}

TEST(RouterDrive, ASoleCarrierIsDrivenAndPolledAlone) {
  Fakes f;
  auto router = make_router({TransportKind::kTcp, TransportKind::kTcp, TransportKind::kTcp}, f);
  EXPECT_EQ(router->caller_progress(), &f.tcp->progress);
  drive_once(*router);
  EXPECT_EQ(f.tcp->begins, 1);
  EXPECT_EQ(f.tcp->ends, 1);
  EXPECT_EQ(f.tcp->progress.polls, 2);
  EXPECT_EQ(f.shm->begins + f.shm->progress.polls, 0);  // present but carries nothing
}

TEST(RouterDrive, ShmAndTcpTogetherAreBothDrivenAndPolledOnEveryWait) {
  Fakes f;
  auto router = make_router({TransportKind::kShm, TransportKind::kShm, TransportKind::kTcp}, f);
  ASSERT_NE(router->caller_progress(), nullptr);
  drive_once(*router);
  for (FakeTransport* t : {f.tcp, f.shm}) {
    EXPECT_EQ(t->begins, 1);
    EXPECT_EQ(t->ends, 1);
    EXPECT_EQ(t->progress.starts, 1);
    EXPECT_EQ(t->progress.polls, 2);
    // About to sleep: every carrier hands over to its own thread, not just the one waited on.
    EXPECT_EQ(t->progress.sleeping_stops, 1);
  }
  EXPECT_EQ(f.ucx->begins, 0);
}

TEST(RouterDrive, ACarrierWhoseWaitersSleepMeansNoDrive) {
  Fakes f;
  auto router = make_router(
      {TransportKind::kShm, TransportKind::kShm, TransportKind::kUcx, TransportKind::kTcp}, f);
  EXPECT_EQ(router->caller_progress(), nullptr);
  drive_once(*router);
  EXPECT_EQ(f.tcp->begins + f.shm->begins + f.ucx->begins, 0);
  EXPECT_EQ(f.tcp->progress.polls + f.shm->progress.polls, 0);
}

TEST(RouterDrive, ShapedLinksMeanNoDrive) {
  Fakes f;
  auto router = make_router({TransportKind::kShm, TransportKind::kShm, TransportKind::kTcp}, f);
  std::vector<std::optional<LinkShape>> shapes(3);
  shapes[2] = LinkShape{125e6, std::chrono::microseconds(10), "test", -1};
  router->set_shaping(std::move(shapes));
  EXPECT_EQ(router->caller_progress(), nullptr);
  drive_once(*router);
  EXPECT_EQ(f.tcp->begins + f.shm->begins, 0);
}

}  // namespace
}  // namespace holmes
