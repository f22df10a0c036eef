// The transport a communicator talks to: it owns one transport of each kind in use and sends
// each peer's traffic through the one chosen for that peer (shm on the host, ucx or verbs in the
// island, tcp between islands). Collectives see a single Transport.
//
// tcp is always present and connects to every peer: it is the control plane. Its sockets close
// when a peer's process or communicator goes away, which shm and ucx cannot see by themselves;
// the router then fails that peer's traffic on whichever transport carries it.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "transports/common/combined_progress.hpp"
#include "transports/kinds.hpp"
#include "transports/shaping/link_shaper.hpp"
#include "transports/transport.hpp"

namespace holmes {

class Router final : public Transport {
 public:
  // `transports` is indexed by TransportKind (nullptr where not created) and must hold tcp.
  // `addresses[kind][peer]` is where peer listens on that kind ("" where it is not used).
  // Sets every transport's peers; connections follow on connect_all() or first use.
  Router(int rank, std::vector<std::unique_ptr<Transport>> transports, std::vector<Route> routes,
         const std::vector<std::vector<std::string>>& addresses);
  ~Router() override;

  const char* name() const override { return "router"; }
  std::string listen_address() const override;
  void set_peers(int rank, std::vector<std::string> addresses) override;
  CompletionPtr connect_all() override;
  CompletionPtr isend(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<const std::byte> data) override;
  CompletionPtr irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<std::byte> data) override;
  CompletionPtr irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                             std::span<std::byte> data, const ReceiveCombine& combine) override;
  void shutdown(hm_status_t status, const std::string& why, bool wait) override;
  LinkProperties link(int peer) const override;
  std::chrono::microseconds yield_before_sleep(int peer) const override;
  void begin_caller_drive() override;
  void end_caller_drive() override;
  Progress* caller_progress() override;
  SharedBoard* shared_board() override;
  void cancel_receive(int peer, std::uint64_t tag) override {
    carrier(peer).cancel_receive(peer, tag);
  }
  void fail_peer(int peer, hm_status_t status, const std::string& message) override;

  const Route& route(int peer) const { return routes_.at(static_cast<std::size_t>(peer)); }
  int size() const { return static_cast<int>(routes_.size()); }

  // Emulated links (transports/shaping): sends to each peer with a shape are held to its rate
  // and latency, whatever transport carries them. Index = peer; call before any traffic.
  void set_shaping(std::vector<std::optional<LinkShape>> shapes);

 private:
  Transport& carrier(int peer) const;
  // The transport that carries every peer's traffic, unshaped; nullptr when there is none.
  Transport* sole_carrier() const;
  // The transports a caller drives (begin_caller_drive): the sole carrier, or every carrier
  // when there are several and the waits on each poll (drive_all_); none when links are shaped.
  std::span<Transport* const> driven() const;

  int rank_;
  std::vector<std::unique_ptr<Transport>> transports_;
  std::vector<Route> routes_;
  std::unique_ptr<LinkShaper> shaper_;      // only when some link is shaped
  std::optional<TransportKind> sole_kind_;  // the kind of every peer's route, if they share one
  // Every carrier of some peer's traffic, each once, in kind order.
  std::vector<Transport*> carriers_;
  // All of carriers_' caller progress as one, when there are several carriers and each has one
  // (tcp, shm and ucx, not verbs): then a caller drives them all and polls them all.
  std::unique_ptr<CombinedProgress> drive_all_;
  // The control plane's io thread reports peer failures until the control plane is gone, which
  // is after the data transports and the shaper: once closing_ is set, reports are dropped.
  std::mutex listener_mutex_;
  bool closing_ = false;
};

}  // namespace holmes
