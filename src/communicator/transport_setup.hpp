// The transports a communicator creates, each configured with its slice of the communicator's
// settings (HOLMES_SHM_*, HOLMES_IB_*, HOLMES_UCX_*: TransportTunings; the tcp ones travel in
// TransportOptions). The transports themselves never read the environment.
#pragma once

#include <memory>
#include <set>
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

// The NIC list tcp stripes over (transports/tcp/nics.hpp): HOLMES_TCP_NICS when given; else
// the NICs the topology file (HOLMES_TOPOLOGY) gives host `host` in an ethernet link class, as
// "name@Gbit/s" at the class's rate over the file's emulation_scale, when it gives two or more
// and each is an interface of this machine (a file that describes other machines leaves tcp on
// its one address, and says so at info); else "" (the listen address alone). `interfaces`: the
// machine's interface names (the first form reads this machine's).
std::string tcp_nics(const Settings& settings, const std::string& host,
                     const std::set<std::string>& interfaces);
std::string tcp_nics(const Settings& settings, const std::string& host);

// Whether this build and machine can run `kind` under these settings (the verbs port choice
// follows HOLMES_IB_DEVICE and HOLMES_IB_GID_INDEX); when not, `why` says so.
bool transport_usable(TransportKind kind, const Settings& settings, std::string* why);

// Creates one; throws HM_ERR_UNSUPPORTED with the reason when it is not available, and
// HM_ERR_INVALID_ARGUMENT naming a bad setting.
std::unique_ptr<Transport> create_transport(TransportKind kind, const TransportOptions& options,
                                            const Settings& settings);

}  // namespace holmes::detail
