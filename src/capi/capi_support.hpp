// What every file of the C API shares: the handle structs and the guard that turns exceptions
// into an hm_status_t plus the thread-local message hm_last_error_message returns.
#pragma once

#include <holmes/holmes.h>
#include <holmes/holmes.hpp>

#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "core/status.hpp"

struct hm_comm {
  explicit hm_comm(holmes::Communicator c) : comm(std::move(c)) {}
  // The per-peer report, filled once, on the first question, so that hm_comm_peer_transport and
  // hm_comm_peer_engine hand out stable pointers, and so that a communicator nobody asks does not
  // work it out (whether NCCL runs here loads libnccl).
  const std::vector<holmes::PeerTransport>& peers() {
    std::call_once(peers_filled_, [this] {
      std::vector<holmes::PeerTransport> all;
      for (int peer = 0; peer < comm.size(); ++peer) all.push_back(comm.peer_transport(peer));
      peers_ = std::move(all);
    });
    return peers_;
  }
  holmes::Communicator comm;

 private:
  std::once_flag peers_filled_;
  std::vector<holmes::PeerTransport> peers_;
};

struct hm_request {
  holmes::Request request;
  int* source = nullptr;  // hm_irecv_any: set to the sender once the receive completes
};

// What hm_config_set stored: the settings by name, as holmes::Config holds them.
struct hm_settings {
  std::map<std::string, std::string> values;
};

namespace holmes::capi {

// The detail of the calling thread's most recent failure.
inline std::string& last_error_message() {
  thread_local std::string message;
  return message;
}

template <typename F>
hm_status_t guarded(const char* function, F&& body) {
  try {
    body();
    return HM_SUCCESS;
  } catch (const holmes::Error& e) {
    last_error_message() = std::string(function) + ": " + e.what();
    return e.status();
  } catch (const std::bad_alloc&) {
    last_error_message() = std::string(function) + ": out of memory";
    return HM_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    last_error_message() = std::string(function) + ": internal error: " + e.what();
    return HM_ERR_INTERNAL;
  } catch (...) {
    last_error_message() = std::string(function) + ": internal error";
    return HM_ERR_INTERNAL;
  }
}

inline holmes::Communicator& comm_of(hm_comm_t comm) {
  holmes::require(comm != nullptr, "comm is NULL");
  holmes::require(comm->comm.valid(), "comm is not a live communicator");
  return comm->comm;
}

template <typename T>
void require_out(T* pointer, const char* name) {
  holmes::require(pointer != nullptr, "output pointer {} is NULL", name);
}

// Hands `text` out as the calls that return a string do: *length (when given) gets the size
// needed with the NUL; buffer NULL with capacity 0 asks only for that; a buffer too small for
// `what` is HM_ERR_INVALID_ARGUMENT.
inline void copy_out(const std::string& text, char* buffer, std::size_t capacity,
                     std::size_t* length, const char* what) {
  if (length != nullptr) *length = text.size() + 1;
  holmes::require(buffer != nullptr || capacity == 0, "buffer is NULL but capacity is {}",
                  capacity);
  if (buffer == nullptr) {
    holmes::require(length != nullptr, "both buffer and length are NULL");
    return;
  }
  holmes::require(capacity >= text.size() + 1,
                  "buffer of {} bytes is too small: {} needs {} (with the NUL)", capacity, what,
                  text.size() + 1);
  std::memcpy(buffer, text.c_str(), text.size() + 1);
}

}  // namespace holmes::capi
