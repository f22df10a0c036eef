#include "bootstrap/rendezvous.hpp"

#include <algorithm>
#include <utility>

#include "bootstrap/socket.hpp"
#include "bootstrap/store_client.hpp"
#include "core/status.hpp"

namespace holmes {
namespace {

// The Holmes store as a KeyValueStore: the client already reports errors that name the key and
// the store, so calls pass straight through.
class HolmesStore final : public KeyValueStore {
 public:
  HolmesStore(const std::string& host, std::uint16_t port, const std::string& token,
              const Deadline& deadline)
      : client_(host, port, token, deadline) {}
  void set(const std::string& key, std::span<const std::uint8_t> value) override {
    client_.set(key, value);
  }
  std::vector<std::uint8_t> get(const std::string& key,
                                std::chrono::milliseconds timeout) override {
    return client_.get(key, Deadline::after(timeout));
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return client_.add(key, delta);
  }
  const StoreClient& client() const { return client_; }

 private:
  StoreClient client_;
};

}  // namespace

Rendezvous::Rendezvous(std::shared_ptr<KeyValueStore> store, bool brought, std::string name,
                       std::string listen_address)
    : store_(std::move(store)),
      brought_(brought),
      name_(std::move(name)),
      listen_address_(std::move(listen_address)) {}

Rendezvous Rendezvous::connect(const std::string& host, std::uint16_t port,
                               const std::string& token, const Deadline& deadline) {
  auto store = std::make_shared<HolmesStore>(host, port, token, deadline);
  std::string name = fmt::format("the Holmes store at {}", store->client().endpoint());
  std::string listen = store->client().local_address();
  return Rendezvous(std::move(store), false, std::move(name), std::move(listen));
}

Rendezvous Rendezvous::brought(std::shared_ptr<KeyValueStore> store,
                               const std::optional<std::string>& route_hint) {
  require(store != nullptr, "the key-value store is null");
  std::optional<std::string> listen;
  if (route_hint) listen = local_address_toward(*route_hint);
  if (!listen) listen = host_name_address();
  return Rendezvous(std::move(store), true, "the store the caller brought",
                    listen.value_or("127.0.0.1"));
}

std::string Rendezvous::default_listen_address() const { return listen_address_; }

template <typename F>
auto Rendezvous::guarded(const char* what, const std::string& key, F&& call) {
  const std::lock_guard lock(*mutex_);
  // The Holmes store's client already names the key and the store in its errors.
  if (!brought_) return call();
  try {
    return call();
  } catch (const Error& e) {
    throw Error(e.status(), fmt::format("{} of '{}' in {}: {}", what, key, name_, e.what()));
  } catch (const std::exception& e) {
    fail(HM_ERR_TRANSPORT, "{} of '{}' in {} failed: {}", what, key, name_, e.what());
  } catch (...) {
    fail(HM_ERR_TRANSPORT, "{} of '{}' in {} failed (an exception that is not std::exception)",
         what, key, name_);
  }
}

void Rendezvous::set(const std::string& key, std::string_view value) {
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(value.data());
  guarded("set", key, [&] { store_->set(key, std::span(bytes, value.size())); });
}

std::string Rendezvous::get(const std::string& key, const Deadline& deadline) {
  // A store waits at least a millisecond: a zero timeout means "forever" to some (torch's).
  const auto timeout = std::max(deadline.remaining(), std::chrono::milliseconds(1));
  const auto value = guarded("get", key, [&] { return store_->get(key, timeout); });
  return std::string(value.begin(), value.end());
}

std::int64_t Rendezvous::add(const std::string& key, std::int64_t delta) {
  return guarded("add", key, [&] { return store_->add(key, delta); });
}

}  // namespace holmes
