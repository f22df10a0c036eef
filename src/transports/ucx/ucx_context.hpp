// The UCP objects behind one ucx transport: a context (active messages and wakeups) and one
// single-threaded worker, created with the user's UCX_* configuration, and released in the right
// order. Unless UCX_NET_DEVICES is set, UCX is restricted to the interface holding the job's
// listen address plus every RDMA port (ucx_devices.hpp); unless UCX_TLS is set, a worker whose
// peers are all on other hosts leaves out UCX's shared-memory transports.
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transports/ucx/config.hpp"
#include "transports/ucx/ucx_address.hpp"

namespace holmes::ucx {

// The UCX library this process runs.
UcxVersion ucx_version();

// Empty when a UCP context opens on this machine, else why not (checked each call).
std::string probe_ucp();

class UcpWorker {
 public:
  // Throws HM_ERR_TRANSPORT naming what failed. `config.listen_host` chooses the network device
  // unless UCX_NET_DEVICES is set; without `config.same_host_peers` UCX's shared-memory
  // transports stay closed unless UCX_TLS is set.
  explicit UcpWorker(const UcxConfig& config);
  ~UcpWorker() { close(); }
  UcpWorker(const UcpWorker&) = delete;
  UcpWorker& operator=(const UcpWorker&) = delete;

  // Destroys the worker (and with it every endpoint and request it still holds), then the
  // context. Idempotent.
  void close();

  ucp_worker_h get() const { return worker_.get(); }
  // The worker's address as UCP packs it, for peers' ucp_ep_create.
  const std::vector<std::uint8_t>& address() const { return address_; }
  // UCX's name of the worker (host:pid), for logs.
  const std::string& name() const { return name_; }
  // Readable when the armed worker has events (ucp_worker_arm).
  int event_fd() const { return event_fd_; }
  // The longest active message header the worker carries.
  std::size_t max_am_header() const { return max_am_header_; }

 private:
  struct ContextCleanup {
    void operator()(ucp_context* context) const { ucp_cleanup(context); }
  };
  struct WorkerDestroy {
    void operator()(ucp_worker* worker) const { ucp_worker_destroy(worker); }
  };
  std::unique_ptr<ucp_context, ContextCleanup> context_;
  std::unique_ptr<ucp_worker, WorkerDestroy> worker_;
  std::vector<std::uint8_t> address_;
  std::string name_;
  std::size_t max_am_header_ = 0;
  int event_fd_ = -1;
};

// "sysv/memory (am, am_bw) + cma/memory (rma_bw)": the transport/device and role of every lane
// in ucp_ep_print_info's output; empty when it lists no lanes.
std::string describe_lanes(const std::string& print_info);

// describe_lanes() of a live endpoint.
std::string endpoint_lanes(ucp_ep_h ep);

}  // namespace holmes::ucx
