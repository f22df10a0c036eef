// holmes::Communicator and holmes::Request: the public C++ API, forwarding to CommunicatorImpl.
#include <holmes/holmes.hpp>

#include "communicator/communicator_impl.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"
#include "transports/kinds.hpp"

namespace holmes {

using detail::CallMode;
using detail::CollectiveCall;
using detail::CommunicatorImpl;
using detail::P2pDirection;

void Request::wait() {
  if (!impl_) fail(HM_ERR_INVALID_ARGUMENT, "wait on an empty Request");
  auto impl = impl_;
  impl->comm->wait(*impl);
}

bool Request::test() {
  if (!impl_) fail(HM_ERR_INVALID_ARGUMENT, "test on an empty Request");
  return impl_->comm->test(*impl_);
}

void Request::wait_on_stream(int* source) {
  if (!impl_) fail(HM_ERR_INVALID_ARGUMENT, "wait_on_stream on an empty Request");
  auto impl = impl_;
  impl->comm->wait_on_stream(impl, source);
  impl_.reset();  // only once the wait is enqueued: a refused one leaves the request the caller's
}

int Request::source() const { return impl_ && impl_->receive && !impl_->any ? impl_->peer : -1; }

Communicator::Communicator(std::shared_ptr<CommunicatorImpl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}
Communicator::~Communicator() {
  if (impl_) impl_->close();
}

Communicator Communicator::init_from_env() { return init(Config{}); }

Communicator Communicator::init(const Config& config) {
  return Communicator(CommunicatorImpl::create_world(detail::resolve_config(config)));
}

Communicator Communicator::join(const Config& config) {
  // A joiner has no rank yet: resolve the rest as a lone rank would, and never serve a store.
  Config lone = config;
  lone.rank = 0;
  lone.world_size = 1;
  lone.serve_store = false;
  return Communicator(CommunicatorImpl::join(detail::resolve_config(lone)));
}

Communicator Communicator::grow(int joining) const { return Communicator(impl().grow(joining)); }

CommunicatorImpl& Communicator::impl() const {
  if (!impl_)
    fail(HM_ERR_INVALID_ARGUMENT, "the Communicator is empty (moved from or not a member)");
  return *impl_;
}

void Communicator::check_sizes(std::size_t a, std::size_t b, const char* what) {
  require(a == b, "{} sizes differ: {} and {} elements", what, a, b);
}

int Communicator::rank() const { return impl().rank(); }
int Communicator::size() const { return impl().size(); }
std::chrono::milliseconds Communicator::timeout() const { return impl().timeout(); }

PeerTransport Communicator::peer_transport(int peer) const {
  const auto route = impl().peer_route(peer);
  auto engine = impl().peer_engine(peer);
  if (peer == rank()) {
    return {"self", route.reason, "this rank", std::move(engine.engine), std::move(engine.reason)};
  }
  return {transport_name(route.kind), route.reason, impl().peer_link(peer),
          std::move(engine.engine), std::move(engine.reason)};
}

namespace {
CollectiveKind kind_of(hm_collective_t collective) {
  const auto kind = collective_from_public(collective);
  require(kind.has_value(), "unknown collective {} (valid: 0..{})", static_cast<int>(collective),
          HM_COLLECTIVE_COUNT - 1);
  return *kind;
}
}  // namespace

void Communicator::set_algorithm(hm_collective_t collective, hm_algorithm_t algorithm) {
  const auto kind = kind_of(collective);
  require(algorithm >= 0 && algorithm < HM_ALGORITHM_COUNT, "unknown algorithm {} (valid: 0..{})",
          static_cast<int>(algorithm), HM_ALGORITHM_COUNT - 1);
  impl().set_algorithm(kind, static_cast<Algorithm>(algorithm));
}

AlgorithmChoice Communicator::query_algorithm(hm_collective_t collective, std::size_t count,
                                              hm_dtype_t dtype) const {
  const auto prediction = impl().query_algorithm(kind_of(collective), count, dtype);
  return {static_cast<hm_algorithm_t>(prediction.algorithm), prediction.microseconds};
}

LinkEstimate Communicator::query_link(int peer) const {
  const LinkCost link = impl().link_cost(peer);
  return {link.latency_us, link.gbytes_per_s};
}

std::string Communicator::settings_dump() const { return impl().settings_dump(); }

Config& Config::set(const std::string& name, const std::string& value) {
  Settings checked;
  checked.set(name, value, SettingSource::kConfig);
  settings[name] = value;
  return *this;
}

std::string settings_dump(const Config& config) {
  return detail::configured_settings(config).dump();
}

Communicator Communicator::split(int color, int key) const {
  return Communicator(impl().split(color, key));
}

void Communicator::abort() noexcept {
  if (impl_) impl_->abort();
}

void Communicator::revoke() noexcept {
  if (impl_) impl_->revoke();
}

Communicator Communicator::shrink(std::span<const int> exclude, int flags) const {
  return Communicator(impl().shrink(exclude, flags));
}

hm_status_t Communicator::async_error() const noexcept {
  return impl_ ? impl_->async_error() : HM_ERR_INVALID_ARGUMENT;
}

void Communicator::set_cuda_stream(void* stream) { impl().set_cuda_stream(stream); }

void Communicator::clear_cuda_stream() { impl().clear_cuda_stream(); }

namespace {

CollectiveCall make_call(CollectiveKind kind, const void* send, void* recv, std::size_t count,
                         hm_dtype_t dtype, hm_op_t op, int root) {
  CollectiveCall call;
  call.kind = kind;
  call.send = send;
  call.recv = recv;
  call.count = count;
  call.dtype = dtype;
  call.op = op;
  call.root = root;
  return call;
}

}  // namespace

void Communicator::allreduce(const void* send, void* recv, std::size_t count, hm_dtype_t dtype,
                             hm_op_t op) {
  impl().collective(make_call(CollectiveKind::kAllreduce, send, recv, count, dtype, op, 0),
                    CallMode::kBlocking);
}
void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recvcount,
                                  hm_dtype_t dtype, hm_op_t op) {
  impl().collective(make_call(CollectiveKind::kReduceScatter, send, recv, recvcount, dtype, op, 0),
                    CallMode::kBlocking);
}
void Communicator::allgather(const void* send, void* recv, std::size_t sendcount,
                             hm_dtype_t dtype) {
  impl().collective(make_call(CollectiveKind::kAllgather, send, recv, sendcount, dtype, HM_SUM, 0),
                    CallMode::kBlocking);
}
void Communicator::broadcast(void* buffer, std::size_t count, hm_dtype_t dtype, int root) {
  impl().collective(
      make_call(CollectiveKind::kBroadcast, buffer, buffer, count, dtype, HM_SUM, root),
      CallMode::kBlocking);
}
void Communicator::reduce(const void* send, void* recv, std::size_t count, hm_dtype_t dtype,
                          hm_op_t op, int root) {
  impl().collective(make_call(CollectiveKind::kReduce, send, recv, count, dtype, op, root),
                    CallMode::kBlocking);
}
void Communicator::alltoall(const void* send, void* recv, std::size_t count, hm_dtype_t dtype) {
  impl().collective(make_call(CollectiveKind::kAlltoall, send, recv, count, dtype, HM_SUM, 0),
                    CallMode::kBlocking);
}
void Communicator::send(const void* buffer, std::size_t count, hm_dtype_t dtype, int peer) {
  impl().point_to_point(P2pDirection::kSend, buffer, count, dtype, peer, CallMode::kBlocking);
}
void Communicator::recv(void* buffer, std::size_t count, hm_dtype_t dtype, int peer) {
  impl().point_to_point(P2pDirection::kReceive, buffer, count, dtype, peer, CallMode::kBlocking);
}
void Communicator::barrier() {
  impl().collective(make_call(CollectiveKind::kBarrier, nullptr, nullptr, 0, HM_UINT8, HM_SUM, 0),
                    CallMode::kBlocking);
}

Request Communicator::iallreduce(const void* send, void* recv, std::size_t count, hm_dtype_t dtype,
                                 hm_op_t op) {
  return Request(
      impl().collective(make_call(CollectiveKind::kAllreduce, send, recv, count, dtype, op, 0),
                        CallMode::kNonblocking));
}
Request Communicator::ireduce_scatter(const void* send, void* recv, std::size_t recvcount,
                                      hm_dtype_t dtype, hm_op_t op) {
  return Request(impl().collective(
      make_call(CollectiveKind::kReduceScatter, send, recv, recvcount, dtype, op, 0),
      CallMode::kNonblocking));
}
Request Communicator::iallgather(const void* send, void* recv, std::size_t sendcount,
                                 hm_dtype_t dtype) {
  return Request(impl().collective(
      make_call(CollectiveKind::kAllgather, send, recv, sendcount, dtype, HM_SUM, 0),
      CallMode::kNonblocking));
}
Request Communicator::ibroadcast(void* buffer, std::size_t count, hm_dtype_t dtype, int root) {
  return Request(impl().collective(
      make_call(CollectiveKind::kBroadcast, buffer, buffer, count, dtype, HM_SUM, root),
      CallMode::kNonblocking));
}
Request Communicator::ireduce(const void* send, void* recv, std::size_t count, hm_dtype_t dtype,
                              hm_op_t op, int root) {
  return Request(
      impl().collective(make_call(CollectiveKind::kReduce, send, recv, count, dtype, op, root),
                        CallMode::kNonblocking));
}
Request Communicator::ialltoall(const void* send, void* recv, std::size_t count, hm_dtype_t dtype) {
  return Request(
      impl().collective(make_call(CollectiveKind::kAlltoall, send, recv, count, dtype, HM_SUM, 0),
                        CallMode::kNonblocking));
}
Request Communicator::isend(const void* buffer, std::size_t count, hm_dtype_t dtype, int peer) {
  return Request(impl().point_to_point(P2pDirection::kSend, buffer, count, dtype, peer,
                                       CallMode::kNonblocking));
}
Request Communicator::irecv(void* buffer, std::size_t count, hm_dtype_t dtype, int peer) {
  return Request(impl().point_to_point(P2pDirection::kReceive, buffer, count, dtype, peer,
                                       CallMode::kNonblocking));
}
Request Communicator::isend(const void* buffer, std::size_t count, hm_dtype_t dtype, int peer,
                            std::uint32_t tag) {
  return Request(impl().point_to_point(P2pDirection::kSend, buffer, count, dtype, peer,
                                       CallMode::kNonblocking, tag));
}
Request Communicator::irecv(void* buffer, std::size_t count, hm_dtype_t dtype, int peer,
                            std::uint32_t tag) {
  return Request(impl().point_to_point(P2pDirection::kReceive, buffer, count, dtype, peer,
                                       CallMode::kNonblocking, tag));
}
Request Communicator::ibarrier() {
  return Request(impl().collective(
      make_call(CollectiveKind::kBarrier, nullptr, nullptr, 0, HM_UINT8, HM_SUM, 0),
      CallMode::kNonblocking));
}

}  // namespace holmes
