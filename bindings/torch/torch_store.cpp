#include "torch_store.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cctype>

namespace holmes::torch_backend {
namespace {

bool mentions_timeout(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text.find("timeout") != std::string::npos || text.find("timed out") != std::string::npos;
}

// torch's stores throw c10::Error (a std::exception); Holmes wants its status codes.
template <typename F>
auto translated(const char* what, F&& call) {
  try {
    return call();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(mentions_timeout(e.what()) ? HM_ERR_TIMEOUT : HM_ERR_TRANSPORT,
                std::string("torch store ") + what + ": " + e.what());
  }
}

}  // namespace

void TorchStore::set(const std::string& key, std::span<const std::uint8_t> value) {
  translated("set",
             [&] { store_->set(key, std::vector<std::uint8_t>(value.begin(), value.end())); });
}

std::vector<std::uint8_t> TorchStore::get(const std::string& key,
                                          std::chrono::milliseconds timeout) {
  return translated("get", [&] {
    // wait() takes our bound; get() alone would wait for the store's own timeout.
    store_->wait({key}, timeout);
    return store_->get(key);
  });
}

std::int64_t TorchStore::add(const std::string& key, std::int64_t delta) {
  return translated("add", [&] { return store_->add(key, delta); });
}

std::optional<std::string> tcp_store_address(const c10::intrusive_ptr<c10d::Store>& store) {
  c10::intrusive_ptr<c10d::Store> at = store;
  for (int depth = 0; depth < 16 && at; ++depth) {
    if (auto* prefix = dynamic_cast<c10d::PrefixStore*>(at.get())) {
      at = prefix->getUnderlyingStore();
      continue;
    }
    if (auto* tcp = dynamic_cast<c10d::TCPStore*>(at.get())) {
      const std::string& host = tcp->getHost();
      const bool v6 = host.find(':') != std::string::npos;
      return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(tcp->getPort());
    }
    break;
  }
  return std::nullopt;
}

}  // namespace holmes::torch_backend
