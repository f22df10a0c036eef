#include "communicator/communicator_impl.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

#include "bootstrap/auth.hpp"
#include "bootstrap/store_client.hpp"
#include "collectives/algorithms.hpp"
#include "communicator/runtime.hpp"
#include "core/bytes.hpp"
#include "core/dtype.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "transports/tcp/tcp_transport.hpp"

namespace holmes::detail {
namespace {

// Bytes a single buffer may span. No process has more than 2^48 bytes of address space (x86-64
// and arm64 user space), so a larger count is a bug in the caller (often a negative number
// converted to size_t), refused before it could overflow pointer arithmetic or a memcpy.
constexpr std::size_t kMaxBufferBytes = std::size_t{1} << 48;

// Fixed-size record each rank contributes to the allgather inside comm_split.
constexpr std::size_t kSplitRecordBytes = 128;

std::string hex(std::span<const std::uint8_t> bytes) {
  std::string out;
  for (auto b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

std::unique_ptr<Transport> make_transport(const std::string& local_addr, int sockets,
                                          const std::string& token, const std::string& context,
                                          std::chrono::milliseconds timeout) {
  tcp::TcpOptions options;
  options.listen_host = local_addr;
  options.sockets_per_peer = sockets;
  options.token = token;
  options.context = context;
  options.connect_timeout = timeout;
  return tcp::make_tcp_transport(options);
}

// Up to this many ranks every pair connects when the communicator is created, so that a rank
// that fails or closes is seen at once by all the others (its sockets close). Larger
// communicators connect on first use, to keep the number of sockets per rank bounded.
constexpr int kEagerConnectMaxRanks = 64;

void connect_eagerly(Transport& transport, int size, const Deadline& deadline) {
  if (size > kEagerConnectMaxRanks) return;
  const auto connected = transport.connect_all();
  if (!connected->wait_until(deadline)) {
    fail(HM_ERR_TIMEOUT, "could not connect to every rank in time");
  }
  if (connected->status() != HM_SUCCESS) throw Error(connected->status(), connected->message());
}

}  // namespace

CommunicatorImpl::CommunicatorImpl(Params params)
    : rank_(params.rank),
      size_(params.size),
      context_(std::move(params.context)),
      transport_(std::move(params.transport)),
      timeout_(params.timeout),
      chunk_bytes_(params.chunk_bytes),
      sockets_per_peer_(params.sockets_per_peer),
      local_addr_(std::move(params.local_addr)),
      token_(std::move(params.token)),
      topology_(std::move(params.topology)),
      sent_to_(static_cast<std::size_t>(size_), 0),
      received_from_(static_cast<std::size_t>(size_), 0) {}

CommunicatorImpl::~CommunicatorImpl() { close(); }

std::shared_ptr<CommunicatorImpl> CommunicatorImpl::create_world(const ResolvedConfig& config) {
  if (config.serve_store) {
    Runtime::get().serve_store(config.store.host, config.store.port, config.token);
  }
  const Deadline deadline = Deadline::after(config.timeout);
  StoreClient store(config.store.host, config.store.port, config.token, deadline);
  // Ranks may create several worlds over one store (tests, restarts); the n-th init of every
  // rank meets the n-th init of the others.
  const auto generation = store.add(fmt::format("holmes/rank{}/inits", config.rank), 1);
  const std::string prefix = fmt::format("holmes/world{}/", generation);
  // Rank 0 names this job instance; the name is bound into every data-plane proof, so ranks of
  // one job never accept connections meant for another that shares the token.
  std::string job;
  if (config.rank == 0) {
    job = hex(auth::random_nonce());
    store.set(prefix + "job", job);
  } else {
    job = store.get_string(prefix + "job", deadline);
  }
  const std::string local = config.local_addr.value_or(store.local_address());
  const std::string context = fmt::format("{}/world{}", job, generation);
  auto transport =
      make_transport(local, config.sockets_per_peer, config.token, context, config.timeout);
  store.set(prefix + fmt::format("rank/{}", config.rank),
            fmt::format("{} {}", config.world_size, transport->listen_address()));
  std::vector<std::string> addresses(static_cast<std::size_t>(config.world_size));
  for (int i = 0; i < config.world_size; ++i) {
    const auto value = store.get_string(prefix + fmt::format("rank/{}", i), deadline);
    const auto space = value.find(' ');
    const std::string their_size = value.substr(0, space);
    if (space == std::string::npos || their_size != std::to_string(config.world_size)) {
      fail(HM_ERR_MISMATCH, "rank {} was started with world size {}, this rank (rank {}) with {}",
           i, their_size, config.rank, config.world_size);
    }
    addresses[static_cast<std::size_t>(i)] = value.substr(space + 1);
  }
  transport->set_peers(config.rank, addresses);
  connect_eagerly(*transport, config.world_size, deadline);
  // Leave together: nobody returns while another rank may still need the store (which rank
  // 0's process serves).
  if (store.add(prefix + "joined", 1) == config.world_size) store.set(prefix + "ready", "1");
  store.get(prefix + "ready", deadline);
  HM_LOG_INFO("rank {}/{}: world up; tcp listening on {}, store {}", config.rank, config.world_size,
              transport->listen_address(), store.endpoint());

  Params params;
  params.rank = config.rank;
  params.size = config.world_size;
  params.context = context;
  params.transport = std::move(transport);
  params.timeout = config.timeout;
  params.chunk_bytes = config.chunk_bytes;
  params.sockets_per_peer = config.sockets_per_peer;
  params.local_addr = local;
  params.token = config.token;
  params.topology = config.topology;
  return std::make_shared<CommunicatorImpl>(std::move(params));
}

std::shared_ptr<CommunicatorImpl> CommunicatorImpl::split(int color, int key) {
  check_usable();
  const bool bad_color = color < 0 && color != HM_COLOR_UNDEFINED;
  const bool member = color >= 0;
  const std::uint64_t index = splits_++;
  const std::string context = fmt::format("{}/split{}:{}", context_, index, color);
  std::unique_ptr<Transport> transport;
  if (member) transport = make_transport(local_addr_, sockets_per_peer_, token_, context, timeout_);

  // Every rank takes part in the exchange, even with a bad color, so that no rank is left
  // waiting for it; the bad color is reported afterwards.
  std::vector<std::uint8_t> mine(kSplitRecordBytes, 0);
  std::vector<std::uint8_t> all(kSplitRecordBytes * static_cast<std::size_t>(size_));
  const std::string address = member ? transport->listen_address() : std::string();
  store_le<std::uint32_t>(mine.data(), static_cast<std::uint32_t>(member ? color : -1));
  store_le<std::uint32_t>(mine.data() + 4, static_cast<std::uint32_t>(key));
  store_le<std::uint32_t>(mine.data() + 8, static_cast<std::uint32_t>(address.size()));
  std::memcpy(mine.data() + 12, address.data(), std::min(address.size(), kSplitRecordBytes - 12));
  CollectiveCall call;
  call.kind = CollectiveKind::kSplit;
  call.send = mine.data();
  call.recv = all.data();
  call.count = kSplitRecordBytes;
  call.dtype = HM_UINT8;
  collective(call, true);
  require(!bad_color, "hm_comm_split: color {} is negative and not HM_COLOR_UNDEFINED", color);
  if (!member) return nullptr;

  struct Member {
    int key;
    int parent_rank;
    std::string address;
  };
  std::vector<Member> members;
  for (int i = 0; i < size_; ++i) {
    const std::uint8_t* record = all.data() + static_cast<std::size_t>(i) * kSplitRecordBytes;
    const auto their_color = static_cast<std::int32_t>(load_le<std::uint32_t>(record));
    if (their_color != color) continue;
    const auto length =
        std::min<std::size_t>(load_le<std::uint32_t>(record + 8), kSplitRecordBytes - 12);
    members.push_back({static_cast<std::int32_t>(load_le<std::uint32_t>(record + 4)), i,
                       std::string(reinterpret_cast<const char*>(record + 12), length)});
  }
  std::stable_sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
    return a.key != b.key ? a.key < b.key : a.parent_rank < b.parent_rank;
  });
  int new_rank = 0;
  std::vector<std::string> addresses;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i].parent_rank == rank_) new_rank = static_cast<int>(i);
    addresses.push_back(members[i].address);
  }
  transport->set_peers(new_rank, addresses);
  connect_eagerly(*transport, static_cast<int>(members.size()), Deadline::after(timeout_));

  Params params;
  params.rank = new_rank;
  params.size = static_cast<int>(members.size());
  params.context = context;
  params.transport = std::move(transport);
  params.timeout = timeout_;
  params.chunk_bytes = chunk_bytes_;
  params.sockets_per_peer = sockets_per_peer_;
  params.local_addr = local_addr_;
  params.token = token_;
  params.topology = topology_;
  return std::make_shared<CommunicatorImpl>(std::move(params));
}

void CommunicatorImpl::validate(const CollectiveCall& call) const {
  const char* name = collective_name(call.kind);
  require(dtype_valid(call.dtype), "{}: unknown dtype {} (valid: 0..{})", name,
          static_cast<int>(call.dtype), HM_DTYPE_COUNT - 1);
  require(op_valid(call.op), "{}: unknown reduction op {} (valid: 0..{})", name,
          static_cast<int>(call.op), HM_OP_COUNT - 1);
  require(call.root >= 0 && call.root < size_, "{}: root {} is outside [0, {})", name, call.root,
          size_);
  // Elements in the largest buffer the call touches.
  const std::size_t es = dtype_size(call.dtype);
  const bool scaled = call.kind == CollectiveKind::kReduceScatter ||
                      call.kind == CollectiveKind::kAllgather ||
                      call.kind == CollectiveKind::kAlltoall;
  const std::size_t factor = scaled ? static_cast<std::size_t>(size_) : 1;
  require(call.count <= kMaxBufferBytes / es / factor,
          "{}: count {} of {} x {} ranks overflows the address space", name, call.count,
          dtype_name(call.dtype), factor);
  if (call.count == 0) return;
  switch (call.kind) {
    case CollectiveKind::kBroadcast:
      require(call.recv != nullptr, "{}: buffer is NULL with count {}", name, call.count);
      break;
    case CollectiveKind::kReduce:
      require(call.send != nullptr, "{}: sendbuf is NULL with count {}", name, call.count);
      require(call.recv != nullptr || rank_ != call.root,
              "{}: recvbuf is NULL on the root (rank {}) with count {}", name, rank_, call.count);
      break;
    case CollectiveKind::kBarrier:
      break;
    default:
      require(call.send != nullptr, "{}: sendbuf is NULL with count {}", name, call.count);
      require(call.recv != nullptr, "{}: recvbuf is NULL with count {}", name, call.count);
  }
}

void CommunicatorImpl::check_usable() const {
  std::lock_guard lock(state_mutex_);
  if (closed_) fail(HM_ERR_ABORTED, "the communicator was destroyed");
  if (error_ == HM_ERR_ABORTED) fail(HM_ERR_ABORTED, "the communicator was aborted");
  if (error_ != HM_SUCCESS) fail(error_, "the communicator failed earlier: {}", error_message_);
}

void CommunicatorImpl::poison(hm_status_t status, const std::string& message) noexcept {
  {
    std::lock_guard lock(state_mutex_);
    if (error_ == HM_SUCCESS) {
      error_ = status;
      error_message_ = message;
    }
  }
  transport_->shutdown(status, message, true);
}

void CommunicatorImpl::execute(const CollectiveCall& call, std::uint64_t sequence) {
  check_usable();
  const auto signature =
      collective_signature(call.kind, call.count, call.dtype, call.op, call.root);
  CollectiveContext ctx(
      *transport_, rank_, size_, sequence, signature, timeout_, chunk_bytes_,
      fmt::format("{} #{} on rank {}", collective_name(call.kind), sequence, rank_), &scratch_,
      &progress_);
  try {
    switch (call.kind) {
      case CollectiveKind::kAllreduce:
        return ring_allreduce(ctx, call.send, call.recv, call.count, call.dtype, call.op);
      case CollectiveKind::kReduceScatter:
        return ring_reduce_scatter(ctx, call.send, call.recv, call.count, call.dtype, call.op);
      case CollectiveKind::kAllgather:
      case CollectiveKind::kSplit:
        return ring_allgather(ctx, call.send, call.recv, call.count, call.dtype);
      case CollectiveKind::kBroadcast:
        return chain_broadcast(ctx, call.recv, call.count, call.dtype, call.root);
      case CollectiveKind::kReduce:
        return chain_reduce(ctx, call.send, call.recv, call.count, call.dtype, call.op, call.root);
      case CollectiveKind::kAlltoall:
        return pairwise_alltoall(ctx, call.send, call.recv, call.count, call.dtype);
      case CollectiveKind::kBarrier:
        return dissemination_barrier(ctx);
    }
  } catch (const Error& e) {
    poison(e.status(), e.what());
    throw;
  } catch (const std::bad_alloc&) {
    poison(HM_ERR_OUT_OF_MEMORY, "out of memory");
    throw Error(HM_ERR_OUT_OF_MEMORY,
                fmt::format("{}: out of memory for scratch buffers", collective_name(call.kind)));
  }
}

std::shared_ptr<RequestImpl> CommunicatorImpl::collective(const CollectiveCall& call,
                                                          bool blocking) {
  validate(call);
  check_usable();
  const std::uint64_t sequence = next_sequence_++;
  if (blocking && queue_.idle()) {
    execute(call, sequence);
    return nullptr;
  }
  auto request = std::make_shared<RequestImpl>();
  request->comm = shared_from_this();
  request->request = std::make_shared<Completion>();
  request->collective = true;
  request->what = collective_name(call.kind);
  queue_.submit([this, call, sequence, done = request->request] {
    try {
      execute(call, sequence);
      done->complete();
    } catch (const Error& e) {
      done->complete(e.status(), e.what());
    } catch (const std::exception& e) {
      done->complete(HM_ERR_INTERNAL, e.what());
    }
  });
  if (blocking) {
    wait(*request);
    return nullptr;
  }
  return request;
}

std::shared_ptr<RequestImpl> CommunicatorImpl::point_to_point(bool is_send, const void* buffer,
                                                              std::size_t count, hm_dtype_t dtype,
                                                              int peer, bool blocking) {
  const char* name = is_send ? "send" : "recv";
  require(dtype_valid(dtype), "{}: unknown dtype {} (valid: 0..{})", name, static_cast<int>(dtype),
          HM_DTYPE_COUNT - 1);
  require(peer >= 0 && peer < size_, "{}: peer {} is outside [0, {})", name, peer, size_);
  require(peer != rank_, "{}: peer {} is this rank; messages to self are not supported", name,
          peer);
  require(count <= kMaxBufferBytes / dtype_size(dtype), "{}: count {} of {} overflows", name, count,
          dtype_name(dtype));
  require(buffer != nullptr || count == 0, "{}: buffer is NULL with count {}", name, count);
  check_usable();
  const std::size_t bytes = count * dtype_size(dtype);
  // Messages between two ranks are matched in order: the n-th send to a peer meets that peer's
  // n-th receive from us. The signature lets the receiver check count and dtype.
  const auto signature = collective_signature(CollectiveKind::kBarrier, count, dtype, -1, -1);
  auto request = std::make_shared<RequestImpl>();
  request->comm = shared_from_this();
  request->peer = peer;
  if (is_send) {
    const auto tag = p2p_tag(sent_to_[static_cast<std::size_t>(peer)]++);
    request->what = fmt::format("send to rank {}", peer);
    request->request =
        transport_->isend(peer, tag, signature, {static_cast<const std::byte*>(buffer), bytes});
  } else {
    const auto tag = p2p_tag(received_from_[static_cast<std::size_t>(peer)]++);
    request->what = fmt::format("recv from rank {}", peer);
    request->request = transport_->irecv(
        peer, tag, signature, {static_cast<std::byte*>(const_cast<void*>(buffer)), bytes});
  }
  if (blocking) {
    wait(*request);
    return nullptr;
  }
  return request;
}

void CommunicatorImpl::wait(RequestImpl& r) {
  if (r.collective) {
    // The worker bounds each of its own waits by the timeout; leave room for the operations
    // queued ahead of this one.
    const auto ahead = static_cast<long long>(queue_.pending()) + 1;
    const auto bound = timeout_ * ahead + std::chrono::seconds(5);
    if (!r.request->wait_until(Deadline::after(bound))) {
      const auto message =
          fmt::format("{}: no result after {} ms (worker stuck)", r.what, bound.count());
      poison(HM_ERR_TIMEOUT, message);
      r.request->wait_until(Deadline::after(std::chrono::seconds(30)));
      fail(HM_ERR_TIMEOUT, "{}", message);
    }
    if (r.request->status() != HM_SUCCESS) throw Error(r.request->status(), r.request->message());
    return;
  }
  if (!r.request->wait_until(Deadline::after(timeout_))) {
    const auto message = fmt::format("{} on rank {}: timed out after {} ms ({})", r.what, rank_,
                                     timeout_.count(), transport_->link(r.peer).description);
    poison(HM_ERR_TIMEOUT, message);
    fail(HM_ERR_TIMEOUT, "{}", message);
  }
  if (r.request->status() != HM_SUCCESS) {
    const auto message = fmt::format("{} on rank {}: {}", r.what, rank_, r.request->message());
    poison(r.request->status(), message);
    throw Error(r.request->status(), message);
  }
}

bool CommunicatorImpl::test(RequestImpl& r) {
  if (!r.request->done()) return false;
  wait(r);  // done: returns at once, or throws its error
  return true;
}

void CommunicatorImpl::abort() noexcept {
  {
    std::lock_guard lock(state_mutex_);
    if (error_ == HM_SUCCESS) {
      error_ = HM_ERR_ABORTED;
      error_message_ = "hm_comm_abort was called";
    }
  }
  transport_->shutdown(HM_ERR_ABORTED, fmt::format("rank {}: hm_comm_abort was called", rank_),
                       false);
}

void CommunicatorImpl::close() noexcept {
  {
    std::lock_guard lock(state_mutex_);
    if (closed_) return;
    closed_ = true;
  }
  if (transport_) transport_->shutdown(HM_ERR_ABORTED, "the communicator was destroyed", true);
  queue_.stop();
}

hm_status_t CommunicatorImpl::async_error() const {
  std::lock_guard lock(state_mutex_);
  return error_;
}

}  // namespace holmes::detail
