// The transports Holmes knows, by name, and which of them this build and machine can run.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "transports/options.hpp"
#include "transports/shm/config.hpp"
#include "transports/transport.hpp"
#include "transports/ucx/config.hpp"
#include "transports/verbs/config.hpp"

namespace holmes {

enum class TransportKind : unsigned char { kTcp = 0, kShm = 1, kUcx = 2, kVerbs = 3 };
inline constexpr TransportKind kAllTransportKinds[] = {TransportKind::kTcp, TransportKind::kShm,
                                                       TransportKind::kUcx, TransportKind::kVerbs};

const char* transport_name(TransportKind kind);
std::optional<TransportKind> transport_from_name(std::string_view name);

// Each transport's own tunables, beyond the TransportOptions they share: the typed slices the
// communicator builds from its settings (communicator/transport_setup.hpp); defaults otherwise.
struct TransportTunings {
  shm::ShmTuning shm;
  ucx::UcxChoices ucx;
  verbs::VerbsConfig verbs;
  verbs::PortPreferences verbs_ports;
};

// Whether this build has the transport and this machine can run it (the verbs port choice
// follows tunings.verbs_ports); when not, `why` says so ("built without UCX", "no RDMA device
// found", ...).
bool transport_available(TransportKind kind, std::string* why,
                         const TransportTunings& tunings = {});
std::vector<TransportKind> available_transports();

// Creates one; throws HM_ERR_UNSUPPORTED with the reason when it is not available, and
// HM_ERR_INVALID_ARGUMENT for tunings it cannot run with.
std::unique_ptr<Transport> make_transport(TransportKind kind, const TransportOptions& options,
                                          const TransportTunings& tunings = {});

}  // namespace holmes

namespace holmes {

// The transport a communicator uses to one peer, and why (for logs and hm_comm_peer_transport).
struct Route {
  TransportKind kind = TransportKind::kTcp;
  std::string reason;
};

}  // namespace holmes
