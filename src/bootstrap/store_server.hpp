// The rendezvous store: a TCP key-value server (SET/GET-with-wait/ADD/CHECK/DELETE) that ranks
// use to find each other. Rank 0 serves it inside the job (as torchrun's rank 0 does) or
// holmes-run / holmes-store serve it outside. Every client must prove the job token first
// (bootstrap/auth.hpp); refused or misbehaving clients are logged and dropped without
// disturbing anyone else. One Asio thread does all the work.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace holmes {

struct StoreServerOptions {
  std::string host = "127.0.0.1";  // address to listen on; "0.0.0.0" or "::" for every address
  std::uint16_t port = 0;          // 0: a free port, see StoreServer::port()
  std::string token;               // the job token clients must prove
  std::chrono::milliseconds handshake_timeout{10000};  // a silent client is dropped after this
};

class StoreServer {
 public:
  // Listens and starts serving; throws HM_ERR_TRANSPORT when the address cannot be bound.
  explicit StoreServer(StoreServerOptions options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  std::uint16_t port() const;
  const std::string& host() const;
  // Connections dropped because they did not prove the token.
  std::uint64_t refused_connections() const;
  // Connections that proved the token.
  std::uint64_t accepted_connections() const;

  class Impl;  // opaque; public so that the server's sessions can name it

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace holmes
