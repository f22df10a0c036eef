#include "transports/kinds.hpp"

#include "core/status.hpp"
#include "transports/tcp/transport.hpp"

#ifdef HOLMES_HAVE_SHM
#include "transports/shm/transport.hpp"
#endif
#ifdef HOLMES_HAVE_UCX
#include "transports/ucx/transport.hpp"
#endif
#ifdef HOLMES_HAVE_VERBS
#include "transports/verbs/transport.hpp"
#endif

namespace holmes {

const char* transport_name(TransportKind kind) {
  switch (kind) {
    case TransportKind::kTcp:
      return "tcp";
    case TransportKind::kShm:
      return "shm";
    case TransportKind::kUcx:
      return "ucx";
    case TransportKind::kVerbs:
      return "verbs";
  }
  return "?";
}

std::optional<TransportKind> transport_from_name(std::string_view name) {
  for (auto kind : kAllTransportKinds) {
    if (name == transport_name(kind)) return kind;
  }
  return std::nullopt;
}

bool transport_available(TransportKind kind, std::string* why, const TransportTunings& tunings) {
  (void)tunings;  // only a built verbs reads them
  std::string reason;
  bool ok = false;
  switch (kind) {
    case TransportKind::kTcp:
      ok = true;
      break;
    case TransportKind::kShm:
#ifdef HOLMES_HAVE_SHM
      ok = shm::shm_available(&reason);
#else
      reason = "this build has no shm transport";
#endif
      break;
    case TransportKind::kUcx:
#ifdef HOLMES_HAVE_UCX
      ok = ucx::ucx_available(&reason);
#else
      reason = "this build has no UCX (HOLMES_WITH_UCX was off or libucx-dev missing)";
#endif
      break;
    case TransportKind::kVerbs:
#ifdef HOLMES_HAVE_VERBS
      ok = verbs::verbs_available(&reason, tunings.verbs_ports);
#else
      reason = "this build has no verbs (HOLMES_WITH_VERBS was off or libibverbs-dev missing)";
#endif
      break;
  }
  if (why != nullptr) *why = reason;
  return ok;
}

std::vector<TransportKind> available_transports() {
  std::vector<TransportKind> out;
  for (auto kind : kAllTransportKinds) {
    if (transport_available(kind, nullptr)) out.push_back(kind);
  }
  return out;
}

std::unique_ptr<Transport> make_transport(TransportKind kind, const TransportOptions& options,
                                          const TransportTunings& tunings) {
  std::string why;
#ifdef HOLMES_HAVE_VERBS
  // A built verbs says itself what is wrong (a malformed device list is HM_ERR_INVALID_ARGUMENT,
  // no usable port HM_ERR_UNSUPPORTED with the reason).
  const bool says_itself = kind == TransportKind::kVerbs;
#else
  const bool says_itself = false;
#endif
  if (!says_itself && !transport_available(kind, &why, tunings)) {
    fail(HM_ERR_UNSUPPORTED, "transport {} is not available: {}", transport_name(kind), why);
  }
  switch (kind) {
    case TransportKind::kTcp:
      return tcp::make_tcp_transport(options);
#ifdef HOLMES_HAVE_SHM
    case TransportKind::kShm:
      return shm::make_shm_transport(options, tunings.shm);
#endif
#ifdef HOLMES_HAVE_UCX
    case TransportKind::kUcx:
      return ucx::make_ucx_transport(options, tunings.ucx);
#endif
#ifdef HOLMES_HAVE_VERBS
    case TransportKind::kVerbs:
      return verbs::make_verbs_transport(options, tunings.verbs, tunings.verbs_ports);
#endif
    default:
      break;
  }
  fail(HM_ERR_UNSUPPORTED, "transport {} is not built", transport_name(kind));
}

}  // namespace holmes
