// What creating a world asks of a key-value store, over either the Holmes store (a StoreClient
// to HOLMES_STORE) or a store the caller brought (holmes::KeyValueStore: torch.distributed's,
// etcd, files ...). Every failure comes out as a holmes::Error that names the key, the
// operation and the store, whatever the store itself threw.
#pragma once

#include <holmes/holmes.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.hpp"

namespace holmes {

class StoreClient;

class Rendezvous {
 public:
  // Through the Holmes store at host:port (connects and proves the token by `deadline`).
  static Rendezvous connect(const std::string& host, std::uint16_t port, const std::string& token,
                            const Deadline& deadline);
  // Through a store the caller brought. `route_hint`: a host the other ranks reach too (the
  // launcher's MASTER_ADDR), whose route picks this rank's default listen address.
  static Rendezvous brought(std::shared_ptr<KeyValueStore> store,
                            const std::optional<std::string>& route_hint);

  void set(const std::string& key, std::string_view value);
  // Waits until the key is set; HM_ERR_TIMEOUT naming it at the deadline.
  std::string get(const std::string& key, const Deadline& deadline);
  std::int64_t add(const std::string& key, std::int64_t delta);
  // Whether a counter (add) is above zero, without waiting.
  bool counted(const std::string& key) { return add(key, 0) > 0; }

  // The address peers should reach this rank at when nothing names one: the local end of the
  // connection to the Holmes store; with a brought store, the address that routes to the hint,
  // else the one this host's name resolves to, else 127.0.0.1.
  std::string default_listen_address() const;

 private:
  Rendezvous(std::shared_ptr<KeyValueStore> store, bool brought, std::string name,
             std::string listen_address);
  template <typename F>
  auto guarded(const char* what, const std::string& key, F&& call);

  std::shared_ptr<KeyValueStore> store_;
  // Communicators of one job share their world's store (hm_comm_shrink meets through it), and a
  // store client is one connection: one request at a time.
  std::shared_ptr<std::mutex> mutex_ = std::make_shared<std::mutex>();
  bool brought_;
  std::string name_;  // "the Holmes store at host:port" or "the store the caller brought"
  std::string listen_address_;
};

}  // namespace holmes
