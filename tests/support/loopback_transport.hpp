// An in-memory transport for running collectives in one process: the endpoints of a
// LoopbackFabric hand each send's payload straight to the receiver's matcher (the one the real
// transports use, transports/matcher.hpp), so sizes and signatures are checked as on a wire and
// a disagreement ends in HM_ERR_MISMATCH. Sends complete once copied; receives when their
// message has been matched. No threads of its own: each rank's thread makes its calls, and the
// sender's delivery completes the receive. Lets the collective algorithms be tested over many
// rank counts without processes or sockets (tests/unit/test_collectives_loopback.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/completion.hpp"
#include "transports/capabilities.hpp"
#include "transports/matcher.hpp"
#include "transports/transport.hpp"

namespace holmes::test {

class LoopbackTransport;

// The endpoints of one in-process job. The routers own the endpoints; the fabric only finds
// them, and must outlive them.
class LoopbackFabric {
 public:
  explicit LoopbackFabric(int ranks) : endpoints_(static_cast<std::size_t>(ranks), nullptr) {}
  int size() const { return static_cast<int>(endpoints_.size()); }
  // Creates rank's endpoint; `combining`: whether it offers combining receives.
  std::unique_ptr<LoopbackTransport> make_endpoint(int rank, bool combining);
  LoopbackTransport* endpoint(int rank) const {
    return endpoints_.at(static_cast<std::size_t>(rank));
  }

 private:
  std::vector<LoopbackTransport*> endpoints_;
};

class LoopbackTransport final : public Transport, public CombiningReceive {
 public:
  LoopbackTransport(LoopbackFabric& fabric, int rank, bool combining)
      : fabric_(fabric),
        rank_(rank),
        combining_(combining),
        matcher_([](int peer) { return fmt::format("rank {} (loopback)", peer); }) {}

  const char* name() const override { return "loopback"; }
  std::string listen_address() const override { return fmt::format("loopback:{}", rank_); }
  void set_peer_failure_listener(PeerFailureListener) override {}
  void set_arrival_listener(ArrivalListener listener) override {
    matcher_.set_arrival_listener(std::move(listener));
  }
  void set_peers(int, std::vector<std::string>) override {}
  CompletionPtr connect_all() override {
    auto done = std::make_shared<Completion>();
    done->complete();
    return done;
  }

  CompletionPtr isend(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<const std::byte> data) override {
    auto request = std::make_shared<Completion>();
    if (auto failure = failed()) {
      request->complete(failure->first, failure->second);
      return request;
    }
    LoopbackTransport* to = peer >= 0 && peer < fabric_.size() ? fabric_.endpoint(peer) : nullptr;
    if (to == nullptr) {
      request->complete(HM_ERR_INTERNAL, fmt::format("no loopback rank {}", peer));
      return request;
    }
    to->arrive(rank_, tag, signature, data);
    request->complete();
    return request;
  }

  CompletionPtr irecv(int peer, std::uint64_t tag, std::uint32_t signature,
                      std::span<std::byte> data) override {
    return post(peer, tag, signature, data, std::nullopt);
  }

  CompletionPtr irecv_reduce(int peer, std::uint64_t tag, std::uint32_t signature,
                             std::span<std::byte> data, const ReceiveCombine& combine) override {
    if (!combining_) return nullptr;
    return post(peer, tag, signature, data, combine);
  }

  void fail_peer(int peer, hm_status_t status, const std::string& message) override {
    std::lock_guard lock(mutex_);
    matcher_.fail_peer(peer, status, message);
  }

  void shutdown(hm_status_t status, const std::string& why, ShutdownWait) override {
    std::lock_guard lock(mutex_);
    if (!failure_) failure_.emplace(status, why);
    matcher_.fail_all(status, why);
  }

  LinkProperties link(int peer) const override {
    return {"loopback", fmt::format("loopback {} -> {}", rank_, peer), 0, 0};
  }

  // A message from `peer` arrives whole: handed to the matcher as one fragment.
  void arrive(int peer, std::uint64_t tag, std::uint32_t signature,
              std::span<const std::byte> data) {
    std::lock_guard lock(mutex_);
    if (failure_) return;
    FragmentHeader header;
    header.tag = tag;
    header.signature = signature;
    header.total = data.size();
    header.length = data.size();
    matcher_.deliver(peer, header, data);
  }

 private:
  std::optional<std::pair<hm_status_t, std::string>> failed() {
    std::lock_guard lock(mutex_);
    return failure_;
  }
  CompletionPtr post(int peer, std::uint64_t tag, std::uint32_t signature,
                     std::span<std::byte> data, const std::optional<ReceiveCombine>& combine) {
    auto request = std::make_shared<Completion>();
    std::lock_guard lock(mutex_);
    if (failure_) {
      request->complete(failure_->first, failure_->second);
    } else {
      matcher_.post(peer, tag, signature, data, request, combine);
    }
    return request;
  }

  LoopbackFabric& fabric_;
  const int rank_;
  const bool combining_;
  std::mutex mutex_;
  Matcher matcher_;
  std::optional<std::pair<hm_status_t, std::string>> failure_;
};

inline std::unique_ptr<LoopbackTransport> LoopbackFabric::make_endpoint(int rank, bool combining) {
  auto endpoint = std::make_unique<LoopbackTransport>(*this, rank, combining);
  endpoints_.at(static_cast<std::size_t>(rank)) = endpoint.get();
  return endpoint;
}

}  // namespace holmes::test
