// The C++ API of Holmes: RAII communicators, std::span buffers, exceptions (holmes::Error) that
// carry the same status codes as the C API. The C API (holmes.h) is a thin layer over this.
#pragma once

#include <holmes/holmes.h>
#include <holmes/error.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace holmes {

namespace detail {
class CommunicatorImpl;
class PlanImpl;
struct RequestImpl;
}  // namespace detail

// Half-precision element types for the typed overloads: plain 16-bit storage.
struct float16_t {
  std::uint16_t bits;
};
struct bfloat16_t {
  std::uint16_t bits;
};

template <typename T>
constexpr hm_dtype_t dtype_of() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, std::int8_t>)
    return HM_INT8;
  else if constexpr (std::is_same_v<U, std::uint8_t>)
    return HM_UINT8;
  else if constexpr (std::is_same_v<U, std::int32_t>)
    return HM_INT32;
  else if constexpr (std::is_same_v<U, std::uint32_t>)
    return HM_UINT32;
  else if constexpr (std::is_same_v<U, std::int64_t>)
    return HM_INT64;
  else if constexpr (std::is_same_v<U, std::uint64_t>)
    return HM_UINT64;
  else if constexpr (std::is_same_v<U, float16_t>)
    return HM_FLOAT16;
  else if constexpr (std::is_same_v<U, bfloat16_t>)
    return HM_BFLOAT16;
  else if constexpr (std::is_same_v<U, float>)
    return HM_FLOAT32;
  else if constexpr (std::is_same_v<U, double>)
    return HM_FLOAT64;
  else
    static_assert(sizeof(T) == 0, "no Holmes dtype for this type");
}

// A key-value store the caller brings (torch.distributed's Store, etcd, Redis, a shared file
// system ...): the ranks of a world meet through it instead of through a Holmes store
// (HOLMES_STORE). Every rank of the world must be handed a store in which the others' keys
// appear. Holmes calls it only while a world is being created, from the creating thread; keys
// start with "holmes/". Failures are reported by throwing (holmes::Error or any
// std::exception): world creation then fails with that message, naming the key.
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // Stores value under key, replacing what was there.
  virtual void set(const std::string& key, std::span<const std::uint8_t> value) = 0;
  // The value of key, waiting up to `timeout` for another rank to set it. Throws
  // holmes::Error(HM_ERR_TIMEOUT) (or any exception) when it is not there in time.
  virtual std::vector<std::uint8_t> get(const std::string& key,
                                        std::chrono::milliseconds timeout) = 0;
  // Adds delta to the integer counter at key (a missing key counts as 0) atomically across
  // ranks, and returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
};

// Options of Communicator::init. Unset fields come from the environment (see holmes.h).
struct HM_API Config {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<std::string> store;  // "host:port"
  std::optional<std::string> token;
  std::optional<std::string> topology;
  std::optional<bool> serve_store;
  std::optional<std::chrono::milliseconds> timeout;
  std::optional<int> sockets_per_peer;
  std::optional<std::string> local_addr;
  // Rendezvous through this store instead of a Holmes store: no rank serves one, and `store` /
  // HOLMES_STORE / MASTER_ADDR are not dialed; their host, when given, only picks the address
  // peers reach this rank at (the local end of the route to it). rank and world_size must come
  // from here or the environment.
  std::shared_ptr<KeyValueStore> kv_store;
  // Any registered setting by name ("HOLMES_SHM_RING_BYTES" -> "1048576"), winning over the
  // environment; the fields above win over the same setting given here. settings_dump() and
  // holmes-run --print-settings list them all.
  std::map<std::string, std::string> settings;

  // Adds one setting, checked at once: throws holmes::Error (HM_ERR_INVALID_ARGUMENT) naming
  // the setting for an unknown name or a value of the wrong type or range.
  Config& set(const std::string& name, const std::string& value);
};

// Every setting `config` would run with (the environment, overridden by the config), one a
// line: name, value and where it came from ("default", "environment", "hm_config_t").
HM_API std::string settings_dump(const Config& config = {});

// How a communicator reaches one peer.
struct PeerTransport {
  std::string transport;  // "tcp", "shm", "ucx", "verbs", or "self"
  std::string reason;     // why it was chosen
  std::string link;       // the link itself, e.g. "tcp 10.0.0.2:4000 x2 sockets"
  // What carries device buffers to the peer in hierarchical collectives: the engine of the
  // group (host, island) the two share ("ipc", "nccl", "ring", "blockwise"), "lanes" across
  // islands, "self"; and why (hm_comm_peer_engine).
  std::string engine;
  std::string engine_reason;
};

// What a collective call runs with: the algorithm and the cost model's prediction.
struct AlgorithmChoice {
  hm_algorithm_t algorithm = HM_ALGO_AUTO;
  double predicted_us = 0;
};

// What the cost model holds for one link (hm_comm_query_link).
struct LinkEstimate {
  double latency_us = 0;
  double gbytes_per_s = 0;
};

// A nonblocking operation. wait() or test() until done; destroying an unfinished Request
// detaches it (the operation still runs to its end).
class HM_API Request {
 public:
  Request() = default;
  // Waits up to the communicator's timeout; throws holmes::Error when the operation failed.
  void wait();
  // True once complete (throws holmes::Error when it failed); never blocks.
  bool test();
  // hm_wait_on_stream: the work enqueued on the communicator's CUDA stream after this waits until
  // the operation is over; returns at once and leaves the Request empty (the stream waits for
  // it). `source`, when given, is set to a receive's sender before the stream goes on.
  void wait_on_stream(int* source = nullptr);
  bool valid() const { return impl_ != nullptr; }
  // A receive's sender: the rank it named, or for HM_ANY_SOURCE the rank whose message it took
  // (known once wait() returned or test() said true; -1 before). -1 for other requests.
  int source() const;

 private:
  friend class Communicator;
  explicit Request(std::shared_ptr<detail::RequestImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<detail::RequestImpl> impl_;
};

// A set of ranks that run collectives together. Move-only: destroying it closes its
// connections (operations still in flight end with HM_ERR_ABORTED).
class HM_API Communicator {
  friend class Plan;

 public:
  Communicator() = default;
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  ~Communicator();

  // The world communicator from the environment (HOLMES_*, torchrun, Slurm, Open MPI).
  static Communicator init_from_env();
  static Communicator init(const Config& config);
  // In a process started to join a running job: its place in the next communicator the job
  // grows (hm_comm_join; rank and world size are not given).
  static Communicator join(const Config& config = {});

  bool valid() const { return impl_ != nullptr; }
  int rank() const;
  int size() const;
  // Collective. Ranks with the same color form a communicator ordered by key, then rank;
  // HM_COLOR_UNDEFINED gives an empty (invalid) Communicator.
  Communicator split(int color, int key) const;
  // Never blocks: wakes every thread blocked on this communicator with HM_ERR_ABORTED.
  void abort() noexcept;
  // abort(), and the other ranks hear of it: their operations on it end with HM_ERR_ABORTED.
  void revoke() noexcept;
  // Collective over the ranks that remain (hm_comm_shrink): a communicator without `exclude`
  // (and, with HM_SHRINK_FAILED, without the ranks the survivors agree have failed), in this
  // communicator's rank order. A rank left out gets holmes::Error HM_ERR_ABORTED.
  Communicator shrink(std::span<const int> exclude, int flags = HM_SHRINK_DEFAULT) const;
  // Collective over this communicator and `joining` processes that call join() (hm_comm_grow).
  Communicator grow(int joining) const;
  // HM_SUCCESS while healthy, else the first error this communicator saw.
  hm_status_t async_error() const noexcept;
  // hm_comm_set_cuda_stream / hm_comm_clear_cuda_stream: collectives, send and recv on device
  // buffers ordered on `stream` (a cudaStream_t), returning once enqueued; or blocking again.
  void set_cuda_stream(void* stream);
  void clear_cuda_stream();
  std::chrono::milliseconds timeout() const;
  PeerTransport peer_transport(int peer) const;

  // Forces an algorithm for a collective (HM_ALGO_AUTO: the cost model picks); every rank must
  // do the same. Throws HM_ERR_INVALID_ARGUMENT for an algorithm the collective lacks.
  void set_algorithm(hm_collective_t collective, hm_algorithm_t algorithm);
  // The algorithm a call with `count` elements (per rank for reduce_scatter/allgather) would run
  // with, and its predicted time.
  AlgorithmChoice query_algorithm(hm_collective_t collective, std::size_t count,
                                  hm_dtype_t dtype) const;
  // The cost model's latency and bandwidth for the link to `peer`.
  LinkEstimate query_link(int peer) const;
  // Every setting this communicator runs with and where each came from, one a line (the
  // topology file's tier numbers included); splits run with their parent's.
  std::string settings_dump() const;

  // Blocking collectives over raw buffers (the C API's semantics).
  void allreduce(const void* send, void* recv, std::size_t count, hm_dtype_t dtype, hm_op_t op);
  void reduce_scatter(const void* send, void* recv, std::size_t recvcount, hm_dtype_t dtype,
                      hm_op_t op);
  void allgather(const void* send, void* recv, std::size_t sendcount, hm_dtype_t dtype);
  void broadcast(void* buffer, std::size_t count, hm_dtype_t dtype, int root);
  void reduce(const void* send, void* recv, std::size_t count, hm_dtype_t dtype, hm_op_t op,
              int root);
  void alltoall(const void* send, void* recv, std::size_t count, hm_dtype_t dtype);
  void send(const void* buffer, std::size_t count, hm_dtype_t dtype, int peer);
  void recv(void* buffer, std::size_t count, hm_dtype_t dtype, int peer);
  void barrier();

  // Nonblocking forms.
  Request iallreduce(const void* send, void* recv, std::size_t count, hm_dtype_t dtype, hm_op_t op);
  Request ireduce_scatter(const void* send, void* recv, std::size_t recvcount, hm_dtype_t dtype,
                          hm_op_t op);
  Request iallgather(const void* send, void* recv, std::size_t sendcount, hm_dtype_t dtype);
  Request ibroadcast(void* buffer, std::size_t count, hm_dtype_t dtype, int root);
  Request ireduce(const void* send, void* recv, std::size_t count, hm_dtype_t dtype, hm_op_t op,
                  int root);
  Request ialltoall(const void* send, void* recv, std::size_t count, hm_dtype_t dtype);
  Request isend(const void* buffer, std::size_t count, hm_dtype_t dtype, int peer);
  Request irecv(void* buffer, std::size_t count, hm_dtype_t dtype, int peer);
  // Tagged point to point (MPI's and torch.distributed's tags, 0 .. 2^30 - 1): messages from one
  // rank to another with the same tag arrive in the order they were sent; a receive with tag t
  // takes the first unmatched message with tag t, whatever was sent before it with other tags.
  // The untagged calls use tag 0. Receives take peer HM_ANY_SOURCE as hm_recv does (the first
  // message with tag t to arrive from any rank; Request::source() names it).
  Request isend(const void* buffer, std::size_t count, hm_dtype_t dtype, int peer,
                std::uint32_t tag);
  Request irecv(void* buffer, std::size_t count, hm_dtype_t dtype, int peer, std::uint32_t tag);
  Request ibarrier();

  // Typed conveniences; sizes are checked against size().
  template <typename T>
  void allreduce(std::span<const T> send, std::span<T> recv, hm_op_t op) {
    check_sizes(send.size(), recv.size(), "allreduce: send and recv");
    allreduce(send.data(), recv.data(), send.size(), dtype_of<T>(), op);
  }
  template <typename T>
  void allreduce(std::span<T> data, hm_op_t op) {
    allreduce(data.data(), data.data(), data.size(), dtype_of<T>(), op);
  }
  template <typename T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv, hm_op_t op) {
    check_sizes(send.size(), recv.size() * static_cast<std::size_t>(size()),
                "reduce_scatter: send and size() x recv");
    reduce_scatter(send.data(), recv.data(), recv.size(), dtype_of<T>(), op);
  }
  template <typename T>
  void allgather(std::span<const T> send, std::span<T> recv) {
    check_sizes(send.size() * static_cast<std::size_t>(size()), recv.size(),
                "allgather: size() x send and recv");
    allgather(send.data(), recv.data(), send.size(), dtype_of<T>());
  }
  template <typename T>
  void broadcast(std::span<T> data, int root) {
    broadcast(data.data(), data.size(), dtype_of<T>(), root);
  }
  template <typename T>
  void send(std::span<const T> data, int peer) {
    send(data.data(), data.size(), dtype_of<T>(), peer);
  }
  template <typename T>
  void recv(std::span<T> data, int peer) {
    recv(data.data(), data.size(), dtype_of<T>(), peer);
  }

 private:
  explicit Communicator(std::shared_ptr<detail::CommunicatorImpl> impl);
  static void check_sizes(std::size_t a, std::size_t b, const char* what);
  detail::CommunicatorImpl& impl() const;
  std::shared_ptr<detail::CommunicatorImpl> impl_;
};

// A model to plan for: a preset or a file, with any field overridden (0 / nullopt: keep).
struct ModelDescription {
  std::string preset;        // "gpt-7.5b", ... (see hm_model_t)
  std::string file;          // a model file (YAML); used when preset is empty
  std::string architecture;  // "gpt" or "mlp"; empty: the preset's or file's
  int layers = 0, hidden = 0, heads = 0, seq_len = 0, vocab = 0;
  int micro_batch = 0, global_batch = 0, dtype_bytes = 0;
  std::optional<bool> recompute;
  int tp = 0, pp = 0;  // 0: the planner chooses
  double gpu_memory_gb = 0;
  double device_tflops = 0;  // 0: the GPU models' speed; else a measured one
};

// Where the calling rank sits in a plan (hm_plan_rank_t); a re-plan's spare has stage, tp_rank
// and dp_rank -1 and no layers or micro-batches.
struct PlanRank {
  int stage = 0, num_stages = 1, first_layer = 0, num_layers = 0;
  int tp_rank = 0, tp_size = 1, dp_rank = 0, dp_size = 1, micro_batches = 1;
};

// Layers a rank of a re-plan holds and did not hold before, and the rank of the new world that
// holds their current state, or -1: none survived (hm_layer_source_t).
struct LayerSource {
  int first_layer = 0, num_layers = 0, rank = -1;
  bool operator==(const LayerSource&) const = default;
};

// The planner's answer for a running job (see holmes.h, "Planner").
class HM_API Plan {
 public:
  Plan() = default;
  // Collective over world; world must outlive the plan's use of communicator().
  static Plan create(const Communicator& world, const ModelDescription& model);
  bool valid() const { return impl_ != nullptr; }
  // Which placement rank() and communicator() describe (default: HM_PLACEMENT_HOLMES).
  void select(hm_placement_t placement);
  PlanRank rank() const;
  // Collective over the world: the caller's group of that kind (empty for a re-plan's spare).
  Communicator communicator(hm_group_t group) const;
  // Collective over newworld, the survivors of this plan's world in its rank order (a split or
  // shrink of it): the same model placed on them (see hm_plan_replan). newworld must outlive the
  // new plan's use of communicator().
  Plan replan(const Communicator& newworld) const;
  // For `rank` of this plan's world: the layers it must fetch after a re-plan (none for a plan
  // from create()).
  std::vector<LayerSource> layer_sources(int rank) const;
  std::string json() const;
  double predicted_step_seconds() const;
  double naive_step_seconds() const;

 private:
  std::shared_ptr<detail::PlanImpl> impl_;
};

}  // namespace holmes
