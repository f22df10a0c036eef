#include "communicator/runtime.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <fmt/format.h>

#include "bootstrap/auth.hpp"
#include "communicator/cuda_device.hpp"
#include "core/log.hpp"
#include "core/status.hpp"

namespace holmes::detail {
namespace {

// The numeric address of a host name ("localhost" -> "127.0.0.1"), or the text itself.
std::string numeric_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return host;
  char text[NI_MAXHOST] = {0};
  const int rc = ::getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof(text), nullptr, 0,
                               NI_NUMERICHOST);
  ::freeaddrinfo(found);
  return rc == 0 ? std::string(text) : host;
}

}  // namespace

Runtime::Runtime() {
  // This object lives until exit, and the stores it serves run threads that draw nonces and MACs
  // from OpenSSL. Initialised here, before this object is complete, OpenSSL registers its
  // exit-time cleanup before ~Runtime is registered, so it cleans up after ~Runtime has stopped
  // those threads. Left to a store thread's first nonce, it cleaned up first: the threads could
  // then call into a finished OpenSSL, and their per-thread OpenSSL state leaked (LeakSanitizer
  // in every process that served the store).
  auth::init_crypto();
}

Runtime& Runtime::get() {
  static Runtime runtime;
  return runtime;
}

void Runtime::serve_store(const std::string& host, std::uint16_t port, const std::string& token) {
  std::lock_guard lock(mutex_);
  const std::string key = fmt::format("{}:{}", host, port);
  if (stores_.count(key)) return;
  const std::string address = numeric_address(host);
  try {
    stores_[key] = std::make_unique<StoreServer>(StoreServerOptions{address, port, token});
  } catch (const Error& first) {
    // The store's host name may name this machine by an address it does not own (a NAT, a
    // service name): fall back to every address, as torchrun's store does.
    try {
      const std::string any = address.find(':') != std::string::npos ? "::" : "0.0.0.0";
      stores_[key] = std::make_unique<StoreServer>(StoreServerOptions{any, port, token});
    } catch (const Error&) {
      fail(HM_ERR_TRANSPORT,
           "cannot serve the rendezvous store at {}: {} (is another job, holmes-run or "
           "holmes-store serving it? then set HOLMES_STORE_SERVE=0)",
           key, first.what());
    }
  }
  HM_LOG_INFO("serving the rendezvous store at {}", key);
}

DeviceMemory* Runtime::device_memory() {
  std::lock_guard lock(mutex_);
  if (!device_chosen_) {
    device_chosen_ = true;
    device_ = make_cuda_device_memory();  // nullptr without CUDA or without a device
  }
  return device_.get();
}

void Runtime::set_device_memory_for_testing(std::unique_ptr<DeviceMemory> device) {
  std::lock_guard lock(mutex_);
  device_ = std::move(device);
  device_chosen_ = device_ != nullptr;
}

}  // namespace holmes::detail
