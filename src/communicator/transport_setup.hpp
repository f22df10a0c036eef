// The transports a communicator creates, each configured with its slice of the communicator's
// settings (HOLMES_SHM_*, HOLMES_IB_*, HOLMES_UCX_*: TransportTunings; the tcp ones travel in
// TransportOptions). The transports themselves never read the environment.
#pragma once

#include <memory>
#include <string>

#include "core/settings.hpp"
#include "transports/kinds.hpp"
#include "transports/options.hpp"
#include "transports/transport.hpp"

namespace holmes::detail {

shm::ShmTuning shm_tuning(const Settings& settings);
verbs::VerbsConfig verbs_config(const Settings& settings);
verbs::PortPreferences port_preferences(const Settings& settings);
ucx::UcxChoices ucx_choices(const Settings& settings);
TransportTunings transport_tunings(const Settings& settings);

// Whether this build and machine can run `kind` under these settings (the verbs port choice
// follows HOLMES_IB_DEVICE and HOLMES_IB_GID_INDEX); when not, `why` says so.
bool transport_usable(TransportKind kind, const Settings& settings, std::string* why);

// Creates one; throws HM_ERR_UNSUPPORTED with the reason when it is not available, and
// HM_ERR_INVALID_ARGUMENT naming a bad setting.
std::unique_ptr<Transport> create_transport(TransportKind kind, const TransportOptions& options,
                                            const Settings& settings);

}  // namespace holmes::detail
