// What every transport keeps about its peers and its own end, in one place:
//  - PeerDirectory: this endpoint's rank, the communicator's size and where each peer listens,
//    set once by set_peers and read from any thread (requests check their peer, errors name it).
//  - PeerFailure: why a peer's traffic fails, once it does (the first reason stays).
//  - ClosedState: this endpoint's shutdown: the status and reason every later request gets.
//  - ConnectWaiters: the completions of connect_all(), settled once every peer the transport
//    serves is connected, or with the first failure.
//  - FailureListener: the router's callback, told about a failed peer before that peer's
//    requests fail, so that whoever wakes from one finds the failure known.
// PeerFailure, ClosedState and ConnectWaiters belong to the transport's progress thread (or
// whoever takes its turn); PeerDirectory and FailureListener may be used from any thread.
#pragma once

#include <holmes/holmes.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.hpp"
#include "core/completion.hpp"

namespace holmes {

class PeerDirectory {
 public:
  // `transport` prefixes its errors ("tcp: cannot send to rank 7").
  explicit PeerDirectory(const char* transport) : transport_(transport) {}

  // Throws HM_ERR_INVALID_ARGUMENT unless set() may take `rank` of `size` ranks: a rank inside
  // the communicator, and peers not set yet.
  void check(int rank, std::size_t size) const;
  // check(), then records the rank and every rank's address (index = rank; "" for a peer the
  // transport does not serve). The size is published last: once size() is not 0 the rest is.
  void set(int rank, std::vector<std::string> addresses);

  int rank() const { return rank_.load(); }
  int size() const { return size_.load(); }  // 0 until set()
  // Where `peer` listens; "?" for a rank outside the communicator (or before set()).
  std::string address(int peer) const;
  // Throws HM_ERR_INVALID_ARGUMENT unless `peer` is another rank of the communicator;
  // `action` says what the caller wanted ("send to", "receive from").
  void require_peer(int peer, const char* action) const;

 private:
  const char* transport_;
  mutable std::mutex mutex_;  // addresses_
  std::vector<std::string> addresses_;
  std::atomic<int> rank_{-1};
  std::atomic<int> size_{0};
};

struct PeerFailure {
  hm_status_t status = HM_SUCCESS;
  std::string message;

  bool failed() const { return status != HM_SUCCESS; }
  // Records a failure unless there is one already; whether this one was recorded.
  bool set(hm_status_t failure, std::string why) {
    if (failed()) return false;
    status = failure;
    message = std::move(why);
    return true;
  }
  // Completes `request` with the failure, if there is one; whether it did.
  bool fail(const CompletionPtr& request) const {
    if (!failed()) return false;
    request->complete(status, message);
    return true;
  }
};

class ClosedState {
 public:
  bool closed() const { return closed_; }
  // Closes with `status` and `why` unless closed already; whether this call closed it.
  bool close(hm_status_t status, std::string why) {
    if (closed_) return false;
    closed_ = true;
    status_ = status;
    why_ = std::move(why);
    return true;
  }
  hm_status_t status() const { return status_; }
  const std::string& why() const { return why_; }
  // Completes `request` with the closing status, once closed; whether it did.
  bool fail(const CompletionPtr& request) const {
    if (!closed_) return false;
    request->complete(status_, why_);
    return true;
  }

 private:
  bool closed_ = false;
  hm_status_t status_ = HM_SUCCESS;
  std::string why_;
};

class ConnectWaiters {
 public:
  // How a peer stands for connect_all().
  enum class Peer { kNotServed, kConnecting, kConnected };

  // `deadline`: when the waiter gives up by itself (expire()); none where every connection
  // attempt has a timeout of its own.
  void add(CompletionPtr done, std::optional<Deadline> deadline = std::nullopt) {
    waiters_.push_back({std::move(done), deadline});
  }
  bool empty() const { return waiters_.empty(); }

  // Completes the waiters: with the failure of the first peer (in rank order) that failed,
  // else successfully once no peer is connecting. `state(peer)` returns how the peer stands and
  // `failure(peer)` its PeerFailure (by value or reference); peers the transport does not serve
  // never count.
  template <typename State, typename Failure>
  void settle(int size, State state, Failure failure) {
    if (waiters_.empty()) return;
    bool connecting = false;
    for (int peer = 0; peer < size; ++peer) {
      const Peer how = state(peer);
      if (how == Peer::kNotServed) continue;
      const auto& failed = failure(peer);
      if (failed.failed()) return complete_all(failed.status, failed.message);
      connecting = connecting || how == Peer::kConnecting;
    }
    if (!connecting) complete_all(HM_SUCCESS, {});
  }

  // Completes every waiter with `status` (HM_SUCCESS: successfully) and `why`.
  void complete_all(hm_status_t status, const std::string& why);

  // The earliest deadline of a waiter; nullopt when none has one.
  std::optional<Clock::time_point> next_deadline() const;
  // Fails the waiters whose deadline has passed with HM_ERR_TIMEOUT and `why()`.
  template <typename Why>
  void expire(Why why) {
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (!it->deadline || !it->deadline->expired()) {
        ++it;
        continue;
      }
      auto done = std::move(it->done);
      it = waiters_.erase(it);
      done->complete(HM_ERR_TIMEOUT, why());
    }
  }

 private:
  struct Waiter {
    CompletionPtr done;
    std::optional<Deadline> deadline;
  };
  std::vector<Waiter> waiters_;
};

class FailureListener {
 public:
  using Callback = std::function<void(int peer, hm_status_t status, const std::string& message)>;

  void set(Callback callback) {
    const std::lock_guard lock(mutex_);
    callback_ = std::move(callback);
  }
  // Tells the listener, if there is one. The callback must not block.
  void operator()(int peer, hm_status_t status, const std::string& message) const {
    Callback callback;
    {
      const std::lock_guard lock(mutex_);
      callback = callback_;
    }
    if (callback) callback(peer, status, message);
  }

 private:
  mutable std::mutex mutex_;
  Callback callback_;
};

}  // namespace holmes
