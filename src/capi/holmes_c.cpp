// The C API: every function checks its handles and pointers, calls the C++ API, and turns
// exceptions into an hm_status_t plus a thread-local message (hm_last_error_message). Nothing
// thrown inside the library crosses this boundary.
#include <holmes/holmes.h>
#include <holmes/holmes.hpp>

#include <cstddef>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "capi/capi_support.hpp"
#include "capi/kv_store_c.hpp"
#include "collectives/algorithm.hpp"
#include "core/dtype.hpp"
#include "core/setting_registry.hpp"
#include "core/status.hpp"

namespace {

using holmes::capi::comm_of;
using holmes::capi::guarded;
using holmes::capi::require_out;

holmes::Config config_from_c(const hm_config_t* c) {
  holmes::Config config;
  if (c == nullptr) return config;
  holmes::require(c->size >= offsetof(hm_config_t, rank) && c->size <= (1u << 16),
                  "hm_config_t.size is {}: initialize the config with HM_CONFIG_INITIALIZER",
                  c->size);
  // A caller built against an older header passes a smaller struct: read only what it has.
  auto has = [c](std::size_t offset, std::size_t length) { return c->size >= offset + length; };
#define HM_HAS(field) has(offsetof(hm_config_t, field), sizeof(c->field))
  if (HM_HAS(rank) && c->rank != -1) {
    holmes::require(c->rank >= 0, "config rank {} is negative (use -1 for unset)", c->rank);
    config.rank = c->rank;
  }
  if (HM_HAS(world_size) && c->world_size != -1) {
    holmes::require(c->world_size >= 1, "config world_size {} must be >= 1 (or -1 for unset)",
                    c->world_size);
    config.world_size = c->world_size;
  }
  if (HM_HAS(store) && c->store != nullptr) config.store = c->store;
  if (HM_HAS(token) && c->token != nullptr) config.token = c->token;
  if (HM_HAS(topology) && c->topology != nullptr) config.topology = c->topology;
  if (HM_HAS(serve_store) && c->serve_store != -1) {
    holmes::require(c->serve_store == 0 || c->serve_store == 1,
                    "config serve_store must be -1, 0 or 1, got {}", c->serve_store);
    config.serve_store = c->serve_store == 1;
  }
  if (HM_HAS(timeout_ms) && c->timeout_ms != 0) {
    holmes::require(c->timeout_ms > 0, "config timeout_ms {} is negative", c->timeout_ms);
    config.timeout = std::chrono::milliseconds(c->timeout_ms);
  }
  if (HM_HAS(sockets_per_peer) && c->sockets_per_peer != 0) {
    config.sockets_per_peer = c->sockets_per_peer;
  }
  if (HM_HAS(local_addr) && c->local_addr != nullptr) config.local_addr = c->local_addr;
  if (HM_HAS(kv_store) && c->kv_store != nullptr) {
    config.kv_store = holmes::capi::kv_store_from_c(*c->kv_store);
  }
  if (HM_HAS(settings) && c->settings != nullptr) config.settings = c->settings->values;
#undef HM_HAS
  return config;
}

// Whether `config` (checked by its size) has the settings field.
bool has_settings_field(const hm_config_t* config) {
  return config->size >= offsetof(hm_config_t, settings) + sizeof(config->settings) &&
         config->size <= (1u << 16);
}

hm_status_t init_into(const char* function, const holmes::Config* config, hm_comm_t* out) {
  return guarded(function, [&] {
    require_out(out, "comm");
    *out = nullptr;
    auto comm =
        config ? holmes::Communicator::init(*config) : holmes::Communicator::init_from_env();
    *out = new hm_comm(std::move(comm));
  });
}

// Runs a nonblocking call and hands out its request.
template <typename F>
hm_status_t start_request(const char* function, hm_comm_t comm, hm_request_t* request, F&& call) {
  return guarded(function, [&] {
    require_out(request, "request");
    *request = nullptr;
    auto& c = comm_of(comm);
    *request = new hm_request{call(c)};
  });
}

}  // namespace

extern "C" {

const char* hm_status_string(hm_status_t status) { return holmes::status_name(status); }

const char* hm_last_error_message(void) { return holmes::capi::last_error_message().c_str(); }

hm_status_t hm_get_version(int* version) {
  return guarded("hm_get_version", [&] {
    require_out(version, "version");
    *version = HOLMES_VERSION_CODE;
  });
}

hm_status_t hm_dtype_size(hm_dtype_t dtype, size_t* size) {
  return guarded("hm_dtype_size", [&] {
    require_out(size, "size");
    holmes::require(holmes::dtype_valid(dtype), "unknown dtype {}", static_cast<int>(dtype));
    *size = holmes::dtype_size(dtype);
  });
}

hm_status_t hm_init_from_env(hm_comm_t* comm) {
  return init_into("hm_init_from_env", nullptr, comm);
}

hm_status_t hm_init(const hm_config_t* config, hm_comm_t* comm) {
  holmes::Config converted;
  const hm_status_t status = guarded("hm_init", [&] {
    holmes::require(config != nullptr, "config is NULL (use hm_init_from_env for defaults)");
    converted = config_from_c(config);
  });
  if (status != HM_SUCCESS) {
    if (comm != nullptr) *comm = nullptr;
    return status;
  }
  return init_into("hm_init", &converted, comm);
}

hm_status_t hm_config_set(hm_config_t* config, const char* name, const char* value) {
  return guarded("hm_config_set", [&] {
    holmes::require(config != nullptr, "config is NULL");
    holmes::require(name != nullptr, "setting name is NULL");
    holmes::require(has_settings_field(config),
                    "hm_config_t.size is {}: the config has no settings field (built against a "
                    "header older than hm_config_set; use HM_CONFIG_INITIALIZER)",
                    config->size);
    if (value == nullptr) {
      holmes::require(holmes::find_setting(name) != nullptr,
                      "unknown setting '{}' (holmes-run --print-settings lists every setting)",
                      name);
      if (config->settings != nullptr) config->settings->values.erase(name);
      return;
    }
    holmes::Config checked;
    checked.set(name, value);  // throws naming the setting and the value
    if (config->settings == nullptr) config->settings = new hm_settings();
    config->settings->values[name] = value;
  });
}

hm_status_t hm_config_release(hm_config_t* config) {
  return guarded("hm_config_release", [&] {
    holmes::require(config != nullptr, "config is NULL");
    if (!has_settings_field(config)) return;
    delete config->settings;
    config->settings = nullptr;
  });
}

hm_status_t hm_config_dump(const hm_config_t* config, char* buffer, size_t capacity,
                           size_t* length) {
  return guarded("hm_config_dump", [&] {
    const holmes::Config converted = config_from_c(config);
    holmes::capi::copy_out(holmes::settings_dump(converted), buffer, capacity, length,
                           "the settings dump");
  });
}

hm_status_t hm_comm_config_dump(hm_comm_t comm, char* buffer, size_t capacity, size_t* length) {
  return guarded("hm_comm_config_dump", [&] {
    holmes::capi::copy_out(comm_of(comm).settings_dump(), buffer, capacity, length,
                           "the settings dump");
  });
}

hm_status_t hm_comm_rank(hm_comm_t comm, int* rank) {
  return guarded("hm_comm_rank", [&] {
    require_out(rank, "rank");
    *rank = comm_of(comm).rank();
  });
}

hm_status_t hm_comm_size(hm_comm_t comm, int* size) {
  return guarded("hm_comm_size", [&] {
    require_out(size, "size");
    *size = comm_of(comm).size();
  });
}

hm_status_t hm_comm_peer_transport(hm_comm_t comm, int peer, const char** transport,
                                   const char** reason) {
  return guarded("hm_comm_peer_transport", [&] {
    require_out(transport, "transport");
    require_out(reason, "reason");
    const auto& c = comm_of(comm);
    holmes::require(peer >= 0 && peer < c.size(), "peer {} is outside [0, {})", peer, c.size());
    const auto& p = comm->peers()[static_cast<std::size_t>(peer)];
    *transport = p.transport.c_str();
    *reason = p.reason.c_str();
  });
}

hm_status_t hm_comm_peer_engine(hm_comm_t comm, int peer, const char** engine,
                                const char** reason) {
  return guarded("hm_comm_peer_engine", [&] {
    require_out(engine, "engine");
    require_out(reason, "reason");
    const auto& c = comm_of(comm);
    holmes::require(peer >= 0 && peer < c.size(), "peer {} is outside [0, {})", peer, c.size());
    const auto& p = comm->peers()[static_cast<std::size_t>(peer)];
    *engine = p.engine.c_str();
    *reason = p.engine_reason.c_str();
  });
}

const char* hm_algorithm_name(hm_algorithm_t algorithm) {
  if (algorithm < 0 || algorithm >= HM_ALGORITHM_COUNT) return "unknown";
  return holmes::algorithm_name(static_cast<holmes::Algorithm>(algorithm));
}

hm_status_t hm_comm_set_algorithm(hm_comm_t comm, hm_collective_t collective,
                                  hm_algorithm_t algorithm) {
  return guarded("hm_comm_set_algorithm",
                 [&] { comm_of(comm).set_algorithm(collective, algorithm); });
}

hm_status_t hm_comm_query_algorithm(hm_comm_t comm, hm_collective_t collective, size_t count,
                                    hm_dtype_t dtype, hm_algorithm_t* algorithm,
                                    double* predicted_us) {
  return guarded("hm_comm_query_algorithm", [&] {
    const auto choice = comm_of(comm).query_algorithm(collective, count, dtype);
    if (algorithm != nullptr) *algorithm = choice.algorithm;
    if (predicted_us != nullptr) *predicted_us = choice.predicted_us;
  });
}

hm_status_t hm_comm_query_link(hm_comm_t comm, int peer, double* latency_us, double* gbytes_per_s) {
  return guarded("hm_comm_query_link", [&] {
    const auto link = comm_of(comm).query_link(peer);
    if (latency_us != nullptr) *latency_us = link.latency_us;
    if (gbytes_per_s != nullptr) *gbytes_per_s = link.gbytes_per_s;
  });
}

hm_status_t hm_comm_split(hm_comm_t comm, int color, int key, hm_comm_t* newcomm) {
  return guarded("hm_comm_split", [&] {
    require_out(newcomm, "newcomm");
    *newcomm = nullptr;
    auto split = comm_of(comm).split(color, key);
    if (split.valid()) *newcomm = new hm_comm(std::move(split));
  });
}

hm_status_t hm_comm_destroy(hm_comm_t comm) {
  return guarded("hm_comm_destroy", [&] {
    holmes::require(comm != nullptr, "comm is NULL");
    delete comm;
  });
}

hm_status_t hm_comm_abort(hm_comm_t comm) {
  return guarded("hm_comm_abort", [&] { comm_of(comm).abort(); });
}

hm_status_t hm_comm_revoke(hm_comm_t comm) {
  return guarded("hm_comm_revoke", [&] { comm_of(comm).revoke(); });
}

hm_status_t hm_comm_shrink(hm_comm_t comm, const int* exclude, int n_exclude, int flags,
                           hm_comm_t* newcomm) {
  return guarded("hm_comm_shrink", [&] {
    require_out(newcomm, "newcomm");
    *newcomm = nullptr;
    holmes::require(n_exclude >= 0, "n_exclude is negative ({})", n_exclude);
    holmes::require(exclude != nullptr || n_exclude == 0, "exclude is NULL with n_exclude {}",
                    n_exclude);
    holmes::require(flags == HM_SHRINK_DEFAULT || flags == HM_SHRINK_FAILED,
                    "unknown flags {} (valid: HM_SHRINK_DEFAULT, HM_SHRINK_FAILED)", flags);
    const std::span<const int> excluded(exclude, static_cast<std::size_t>(n_exclude));
    *newcomm = new hm_comm(comm_of(comm).shrink(excluded, flags));
  });
}

hm_status_t hm_comm_grow(hm_comm_t comm, int n_joining, hm_comm_t* newcomm) {
  return guarded("hm_comm_grow", [&] {
    require_out(newcomm, "newcomm");
    *newcomm = nullptr;
    *newcomm = new hm_comm(comm_of(comm).grow(n_joining));
  });
}

hm_status_t hm_comm_join(const hm_config_t* config, hm_comm_t* newcomm) {
  return guarded("hm_comm_join", [&] {
    require_out(newcomm, "newcomm");
    *newcomm = nullptr;
    const holmes::Config converted = config ? config_from_c(config) : holmes::Config{};
    *newcomm = new hm_comm(holmes::Communicator::join(converted));
  });
}

hm_status_t hm_comm_get_async_error(hm_comm_t comm, hm_status_t* async_error) {
  return guarded("hm_comm_get_async_error", [&] {
    require_out(async_error, "async_error");
    *async_error = comm_of(comm).async_error();
  });
}

hm_status_t hm_comm_set_cuda_stream(hm_comm_t comm, void* stream) {
  return guarded("hm_comm_set_cuda_stream", [&] { comm_of(comm).set_cuda_stream(stream); });
}

hm_status_t hm_comm_clear_cuda_stream(hm_comm_t comm) {
  return guarded("hm_comm_clear_cuda_stream", [&] { comm_of(comm).clear_cuda_stream(); });
}

hm_status_t hm_allreduce(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                         hm_dtype_t dtype, hm_op_t op) {
  return guarded("hm_allreduce",
                 [&] { comm_of(comm).allreduce(sendbuf, recvbuf, count, dtype, op); });
}

hm_status_t hm_reduce_scatter(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                              hm_dtype_t dtype, hm_op_t op) {
  return guarded("hm_reduce_scatter",
                 [&] { comm_of(comm).reduce_scatter(sendbuf, recvbuf, recvcount, dtype, op); });
}

hm_status_t hm_allgather(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t sendcount,
                         hm_dtype_t dtype) {
  return guarded("hm_allgather",
                 [&] { comm_of(comm).allgather(sendbuf, recvbuf, sendcount, dtype); });
}

hm_status_t hm_broadcast(hm_comm_t comm, void* buf, size_t count, hm_dtype_t dtype, int root) {
  return guarded("hm_broadcast", [&] { comm_of(comm).broadcast(buf, count, dtype, root); });
}

hm_status_t hm_reduce(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                      hm_dtype_t dtype, hm_op_t op, int root) {
  return guarded("hm_reduce",
                 [&] { comm_of(comm).reduce(sendbuf, recvbuf, count, dtype, op, root); });
}

hm_status_t hm_alltoall(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                        hm_dtype_t dtype) {
  return guarded("hm_alltoall", [&] { comm_of(comm).alltoall(sendbuf, recvbuf, count, dtype); });
}

hm_status_t hm_send(hm_comm_t comm, const void* buf, size_t count, hm_dtype_t dtype, int peer) {
  return guarded("hm_send", [&] { comm_of(comm).send(buf, count, dtype, peer); });
}

hm_status_t hm_recv(hm_comm_t comm, void* buf, size_t count, hm_dtype_t dtype, int peer) {
  return guarded("hm_recv", [&] { comm_of(comm).recv(buf, count, dtype, peer); });
}

hm_status_t hm_recv_any(hm_comm_t comm, void* buf, size_t count, hm_dtype_t dtype, int* source) {
  return guarded("hm_recv_any", [&] {
    require_out(source, "source");
    auto request = comm_of(comm).irecv(buf, count, dtype, HM_ANY_SOURCE);
    request.wait();
    *source = request.source();
  });
}

hm_status_t hm_barrier(hm_comm_t comm) {
  return guarded("hm_barrier", [&] { comm_of(comm).barrier(); });
}

hm_status_t hm_iallreduce(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                          hm_dtype_t dtype, hm_op_t op, hm_request_t* request) {
  return start_request("hm_iallreduce", comm, request, [&](holmes::Communicator& c) {
    return c.iallreduce(sendbuf, recvbuf, count, dtype, op);
  });
}

hm_status_t hm_ireduce_scatter(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t recvcount,
                               hm_dtype_t dtype, hm_op_t op, hm_request_t* request) {
  return start_request("hm_ireduce_scatter", comm, request, [&](holmes::Communicator& c) {
    return c.ireduce_scatter(sendbuf, recvbuf, recvcount, dtype, op);
  });
}

hm_status_t hm_iallgather(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t sendcount,
                          hm_dtype_t dtype, hm_request_t* request) {
  return start_request("hm_iallgather", comm, request, [&](holmes::Communicator& c) {
    return c.iallgather(sendbuf, recvbuf, sendcount, dtype);
  });
}

hm_status_t hm_ibroadcast(hm_comm_t comm, void* buf, size_t count, hm_dtype_t dtype, int root,
                          hm_request_t* request) {
  return start_request("hm_ibroadcast", comm, request, [&](holmes::Communicator& c) {
    return c.ibroadcast(buf, count, dtype, root);
  });
}

hm_status_t hm_ireduce(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                       hm_dtype_t dtype, hm_op_t op, int root, hm_request_t* request) {
  return start_request("hm_ireduce", comm, request, [&](holmes::Communicator& c) {
    return c.ireduce(sendbuf, recvbuf, count, dtype, op, root);
  });
}

hm_status_t hm_ialltoall(hm_comm_t comm, const void* sendbuf, void* recvbuf, size_t count,
                         hm_dtype_t dtype, hm_request_t* request) {
  return start_request("hm_ialltoall", comm, request, [&](holmes::Communicator& c) {
    return c.ialltoall(sendbuf, recvbuf, count, dtype);
  });
}

hm_status_t hm_isend(hm_comm_t comm, const void* buf, size_t count, hm_dtype_t dtype, int peer,
                     hm_request_t* request) {
  return start_request("hm_isend", comm, request,
                       [&](holmes::Communicator& c) { return c.isend(buf, count, dtype, peer); });
}

hm_status_t hm_irecv(hm_comm_t comm, void* buf, size_t count, hm_dtype_t dtype, int peer,
                     hm_request_t* request) {
  return start_request("hm_irecv", comm, request,
                       [&](holmes::Communicator& c) { return c.irecv(buf, count, dtype, peer); });
}

hm_status_t hm_irecv_any(hm_comm_t comm, void* buf, size_t count, hm_dtype_t dtype, int* source,
                         hm_request_t* request) {
  return guarded("hm_irecv_any", [&] {
    require_out(source, "source");
    require_out(request, "request");
    *request = nullptr;
    auto r = comm_of(comm).irecv(buf, count, dtype, HM_ANY_SOURCE);
    *request = new hm_request{std::move(r), source};
  });
}

hm_status_t hm_ibarrier(hm_comm_t comm, hm_request_t* request) {
  return start_request("hm_ibarrier", comm, request,
                       [&](holmes::Communicator& c) { return c.ibarrier(); });
}

hm_status_t hm_wait(hm_request_t* request) {
  hm_request_t owned = nullptr;
  const hm_status_t checked = guarded("hm_wait", [&] {
    holmes::require(request != nullptr && *request != nullptr, "request is NULL");
    owned = *request;
    *request = nullptr;
  });
  if (checked != HM_SUCCESS) return checked;
  const hm_status_t status = guarded("hm_wait", [&] {
    owned->request.wait();
    if (owned->source != nullptr) *owned->source = owned->request.source();
  });
  delete owned;
  return status;
}

hm_status_t hm_wait_on_stream(hm_request_t* request) {
  const hm_status_t status = guarded("hm_wait_on_stream", [&] {
    holmes::require(request != nullptr && *request != nullptr, "request is NULL");
    (*request)->request.wait_on_stream((*request)->source);
  });
  if (status == HM_SUCCESS) {
    delete *request;
    *request = nullptr;
  }
  return status;
}

hm_status_t hm_test(hm_request_t* request, int* done) {
  bool finished = false;
  const hm_status_t status = guarded("hm_test", [&] {
    require_out(done, "done");
    *done = 0;
    holmes::require(request != nullptr && *request != nullptr, "request is NULL");
    // A failed operation throws here; it is finished all the same.
    finished = true;
    finished = (*request)->request.test();
    if (finished && (*request)->source != nullptr)
      *(*request)->source = (*request)->request.source();
  });
  if (finished && request != nullptr && *request != nullptr) {
    *done = 1;
    delete *request;
    *request = nullptr;
  }
  return status;
}

hm_status_t hm_request_free(hm_request_t request) {
  return guarded("hm_request_free", [&] {
    holmes::require(request != nullptr, "request is NULL");
    delete request;
  });
}

}  // extern "C"
