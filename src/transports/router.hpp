// What a communicator talks to: it owns one transport of each kind in use and sends each peer's
// traffic through the one chosen for that peer (shm on the host, ucx or verbs in the island, tcp
// between islands). The router is not a transport itself: it has no address of its own and
// its peers are set when it is built. It offers what collectives need of the carriers, each
// capability (capabilities.hpp) through whichever carrier has it for a peer.
//
// tcp is always present and connects to every peer: it is the control plane. Its sockets close
// when a peer's process or communicator goes away, which shm and ucx cannot see by themselves;
// the router then fails that peer's traffic on whichever transport carries it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "transports/arrival_order.hpp"
#include "transports/capabilities.hpp"
#include "transports/common/combined_progress.hpp"
#include "transports/kinds.hpp"
#include "transports/shaping/link_shaper.hpp"
#include "transports/transport.hpp"

namespace holmes {

// A caller drives the router as it would a transport (CallerDrive): every carrier it drives
// is driven, and its waits poll them all.
class Router final : public CallerDrive {
 public:
  // `transports` is indexed by TransportKind (nullptr where not created) and must hold tcp.
  // `addresses[kind][peer]` is where peer listens on that kind ("" where it is not used).
  // Sets every transport's peers; connections follow on connect_all() or first use.
  Router(int rank, std::vector<std::unique_ptr<Transport>> transports, std::vector<Route> routes,
         const std::vector<std::vector<std::string>>& addresses);
  ~Router() override;
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Every carrier's Transport::connect_all, as one completion.
  CompletionPtr connect_all();
  CompletionPtr isend(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<const std::byte> data);
  CompletionPtr irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<std::byte> data);
  // CombiningReceive::irecv_reduce on the peer's carrier; nullptr when that carrier has no
  // combining receives or declines this one (the caller then receives and reduces itself).
  CompletionPtr irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                             std::span<std::byte> data, const ReceiveCombine& combine);
  // SharedBoardAccess::cancel_receive on the peer's carrier; nothing for carriers without a
  // board (they post no receive a board wait could leave behind).
  void cancel_receive(int peer, std::uint64_t tag);
  // Memory every rank can read: the sole carrier's board, when every peer's traffic takes the
  // one transport and it has one (shm), and no link is shaped; nullptr otherwise.
  SharedBoard* shared_board();
  void shutdown(hm_status_t status, const std::string& why, ShutdownWait wait);
  // shutdown(HM_ERR_ABORTED, why, kReturnAtOnce), telling every peer through the control plane
  // (PeerRevocation): their routers report this rank with HM_ERR_ABORTED. Never blocks.
  void revoke(const std::string& why);
  // Told of every peer the control plane reports failed (HM_ERR_PEER_FAILED: gone or broken;
  // HM_ERR_ABORTED: it revoked), on the control plane's io thread, after that peer's traffic
  // was failed everywhere: it must not block. Set before traffic; nullptr stops the reports.
  void set_failure_observer(Transport::PeerFailureListener observer);
  LinkProperties link(int peer) const;
  void fail_peer(int peer, hm_status_t status, const std::string& message);
  // Which point-to-point message each receive takes, from the order every carrier sees them
  // arrive in (receives from any source).
  ArrivalOrder& arrivals() { return arrivals_; }

  // CallerDrive, over the carriers the caller can drive (driven()).
  void begin_caller_drive() override;
  void end_caller_drive() override;
  Progress* caller_progress() override;
  std::chrono::microseconds yield_before_sleep(int peer) const override;

  const Route& route(int peer) const { return routes_.at(static_cast<std::size_t>(peer)); }
  int size() const { return static_cast<int>(routes_.size()); }

  // Emulated links (transports/shaping): sends to each peer with a shape are held to its rate
  // and latency, whatever transport carries them. Index = peer; call before any traffic.
  void set_shaping(std::vector<std::optional<LinkShape>> shapes);

 private:
  // A transport of some kind and the capabilities it has (nullptr where it has not).
  struct Carrier {
    Transport* transport = nullptr;
    CombiningReceive* combining = nullptr;
    CallerDrive* drive = nullptr;
    SharedBoardAccess* board = nullptr;
  };

  const Carrier& carrier(int peer) const;
  // The carrier of every peer's traffic, unshaped; nullptr when there is none.
  const Carrier* sole_carrier() const;
  // The carriers a caller drives (begin_caller_drive): the sole carrier, or every carrier when
  // there are several and the waits on each poll (drive_all_); none when links are shaped.
  std::span<CallerDrive* const> driven() const;

  int rank_;
  // Before the transports: their threads report arrivals into it until they are gone.
  ArrivalOrder arrivals_;
  std::vector<std::unique_ptr<Transport>> transports_;
  std::vector<Carrier> kinds_;  // indexed by TransportKind, like transports_
  std::vector<Route> routes_;
  std::unique_ptr<LinkShaper> shaper_;      // only when some link is shaped
  std::optional<TransportKind> sole_kind_;  // the kind of every peer's route, if they share one
  // The caller drive of every carrier of some peer's traffic, each once, in kind order, when
  // every carrier has one.
  std::vector<CallerDrive*> drives_;
  // All of drives_' caller progress as one, when there are several carriers and each has one
  // (tcp, shm and ucx, not verbs): then a caller drives them all and polls them all.
  std::unique_ptr<CombinedProgress> drive_all_;
  // The control plane's io thread reports peer failures until the control plane is gone, which
  // is after the data transports and the shaper: once closing_ is set, reports are dropped.
  std::mutex listener_mutex_;
  bool closing_ = false;
  Transport::PeerFailureListener observer_;  // guarded by listener_mutex_
};

}  // namespace holmes
