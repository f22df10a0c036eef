#include "capi/kv_store_c.hpp"

#include <limits>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace holmes::capi {
namespace {

class CKeyValueStore final : public KeyValueStore {
 public:
  explicit CKeyValueStore(const hm_kv_store_t& store) : store_(store) {}

  void set(const std::string& key, std::span<const std::uint8_t> value) override {
    const int rc = store_.set(store_.user, key.c_str(), value.data(), value.size());
    if (rc != 0) fail(HM_ERR_TRANSPORT, "hm_kv_store_t.set returned {}", rc);
  }

  std::vector<std::uint8_t> get(const std::string& key,
                                std::chrono::milliseconds timeout) override {
    const auto ms = std::min<long long>(timeout.count(), std::numeric_limits<int>::max());
    std::vector<std::uint8_t> value(256);
    // A value that changes size between two calls (another rank set it again) is read again;
    // a few rounds cover any honest store.
    for (int attempt = 0; attempt < 8; ++attempt) {
      std::size_t length = 0;
      const int rc = store_.get(store_.user, key.c_str(), value.data(), value.size(), &length,
                                static_cast<int>(ms));
      if (rc == 1) fail(HM_ERR_TIMEOUT, "hm_kv_store_t.get: not set within {} ms", ms);
      if (rc != 0) fail(HM_ERR_TRANSPORT, "hm_kv_store_t.get returned {}", rc);
      require(length <= (std::size_t{1} << 30),
              "hm_kv_store_t.get reported a value of {} bytes (at most 1 GiB)", length);
      if (length <= value.size()) {
        value.resize(length);
        return value;
      }
      value.resize(length);
    }
    fail(HM_ERR_TRANSPORT, "hm_kv_store_t.get: the value's length kept changing");
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::int64_t result = 0;
    const int rc = store_.add(store_.user, key.c_str(), delta, &result);
    if (rc != 0) fail(HM_ERR_TRANSPORT, "hm_kv_store_t.add returned {}", rc);
    return result;
  }

 private:
  hm_kv_store_t store_;
};

}  // namespace

std::shared_ptr<KeyValueStore> kv_store_from_c(const hm_kv_store_t& store) {
  require(store.size == sizeof(hm_kv_store_t),
          "hm_kv_store_t.size is {}, expected {}: initialize it with HM_KV_STORE_INITIALIZER",
          store.size, sizeof(hm_kv_store_t));
  require(store.set != nullptr, "hm_kv_store_t.set is NULL");
  require(store.get != nullptr, "hm_kv_store_t.get is NULL");
  require(store.add != nullptr, "hm_kv_store_t.add is NULL");
  return std::make_shared<CKeyValueStore>(store);
}

}  // namespace holmes::capi
