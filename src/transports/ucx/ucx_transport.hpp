// ucx transport over UCP active messages: the tier inside RDMA islands. UCX picks the wires
// itself (shared memory and cma on one host; rc/ud/dc over InfiniBand or RoCE; tcp otherwise).
//
// - One UCP context and worker per transport (single-threaded mode, ucx_context.hpp).
//   listen_address() is the worker address, hex-encoded with the UCX version and a checksum
//   (ucx_address.hpp); peers create endpoints to it. Endpoints use error-handling mode "none"
//   (mode "peer" makes UCX drop its shared-memory lanes), so a peer's failure is learnt from the
//   Router (fail_peer, when the tcp control plane sees the peer go) and from the goodbye message
//   a closing endpoint sends to every peer it serves.
// - Every message is one active message with a header (ucx_wire.hpp: sender, tag, signature,
//   size, and a cookie of the job token and communicator) and is tag-matched by the shared
//   Matcher, so a receive posted before or after its message, sizes and signatures work exactly
//   as on tcp. Large messages arrive by rendezvous: UCP reads them straight into the posted
//   buffer, or into a kept piece when the receive is not posted yet, so a sender never waits for
//   its receiver to post. A caller's receive completes only once UCP has stopped writing into
//   its buffer.
// - One progress thread per transport makes the UCX calls: it progresses the worker until idle,
//   arms it and sleeps in poll() on the worker's event fd and on an eventfd through which caller
//   threads hand over isend/irecv/shutdown. Nothing spins. While a caller drives a small
//   collective (Transport::begin_caller_drive), the thread parks (progress_turns.hpp) and that
//   caller makes the calls itself, posting at once and progressing the worker between yields while
//   it waits: a small message then costs no thread wake-up. A mutex lets one thread at a time at
//   the worker (single-threaded mode asks no more than that).
// - shutdown fails what is pending, sends the goodbyes and flushes the endpoints of live peers
//   (bounded), then destroys the worker and the context. Requests for peers that failed or left
//   cannot be cancelled in mode "none": their callers are answered at once for a failed peer,
//   after a short grace for one that said goodbye (it reads and writes nothing more), and UCP
//   drops the requests with the worker.
// - UCX reads its UCX_* environment as usual. When UCX_NET_DEVICES is unset, UCX is restricted
//   to the interface holding options.listen_host plus every RDMA port (ucx_devices.hpp). When
//   UCX_TLS is unset and options.ucx_same_host_peers is false (the communicator's ucx peers are
//   all on other hosts), UCX's shared-memory transports are left out.
#pragma once

#include <memory>
#include <string>

#include "transports/options.hpp"
#include "transports/transport.hpp"

namespace holmes::ucx {

// True when this build has UCX and ucp_init works on this machine (checked once per process);
// otherwise false with the reason in `why`.
bool ucx_available(std::string* why);

// Opens the UCP context and worker at once (reads listen_host, token, context and
// connect_timeout); throws HM_ERR_TRANSPORT when UCX cannot start.
std::unique_ptr<Transport> make_ucx_transport(const TransportOptions& options);

}  // namespace holmes::ucx
