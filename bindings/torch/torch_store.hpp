// torch.distributed's Store (the one torch hands a backend, usually a PrefixStore over a
// TCPStore) as Holmes's KeyValueStore, so ranks meet through whatever init_process_group set up
// (env://, tcp://, file://, a user's own store) with no HOLMES_* variable.
#pragma once

#include <holmes/holmes.hpp>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <optional>
#include <string>

namespace holmes::torch_backend {

class TorchStore final : public KeyValueStore {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, std::span<const std::uint8_t> value) override;
  std::vector<std::uint8_t> get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

// "host:port" of the TCPStore under any PrefixStores: the other ranks reach that host too, so the
// route to it picks the address this rank listens on. nullopt for other stores.
std::optional<std::string> tcp_store_address(const c10::intrusive_ptr<c10d::Store>& store);

}  // namespace holmes::torch_backend
