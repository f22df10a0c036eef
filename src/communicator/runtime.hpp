// The process-wide runtime object: the one place with state shared by all communicators of a
// process. Today it holds the rendezvous stores this process serves (rank 0 serves the store
// for the whole job and must keep serving it after its own init returns).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "bootstrap/store_server.hpp"
#include "collectives/device_memory.hpp"

namespace holmes::detail {

class Runtime {
 public:
  static Runtime& get();

  // Serves a store at host:port (host may be a name) for the rest of the process, unless this
  // process already does. Binds the host's address, or every address when the host is not
  // local. Throws HM_ERR_TRANSPORT naming the address when the port is taken.
  void serve_store(const std::string& host, std::uint16_t port, const std::string& token);

  // Device memory support: CUDA when this build has it and a device is present, else none
  // (nullptr). Chosen once.
  DeviceMemory* device_memory();
  // Tests install a fake device (see tests/mp) to exercise staging without a GPU; nullptr
  // restores the default.
  void set_device_memory_for_testing(std::unique_ptr<DeviceMemory> device);

 private:
  Runtime();
  std::mutex mutex_;
  bool device_chosen_ = false;
  std::unique_ptr<DeviceMemory> device_;
  std::map<std::string, std::unique_ptr<StoreServer>> stores_;
};

}  // namespace holmes::detail
