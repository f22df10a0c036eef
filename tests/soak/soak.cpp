// The soak: one program, run as N ranks under holmes-run, that issues random collectives for a
// bounded time and checks every result exactly. All ranks draw the same seeded sequence, so they
// agree on each operation without talking: the kind (every collective, point-to-point and
// barrier), dtype, op, count (0 to a few MiB), root, in place or not, blocking or not, and the
// algorithm (hm_comm_set_algorithm, among those each collective accepts, or auto). Inputs and
// expected results come from tools/common/check_data.hpp, whose values reduce exactly in every
// dtype, so "checked" means byte-equal to a reference computed locally.
//
//   holmes-soak [--seconds S] [--seed N] [--max-bytes B]
//
// Rank 0 decides when time is up and tells the others through a control communicator of its own
// (so that the forced algorithms never apply to it). Exit status: 0 when every operation
// succeeded and every result matched, 1 when a result was wrong, 2 when a call failed.
#include <holmes/holmes.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check_data.hpp"

namespace {

using Bytes = std::vector<unsigned char>;
using Clock = std::chrono::steady_clock;

enum Kind {
  kAllreduce,
  kReduceScatter,
  kAllgather,
  kBroadcast,
  kReduce,
  kAlltoall,
  kSendRecv,
  kBarrier,
  kKindCount
};
constexpr const char* kKindNames[kKindCount] = {"allreduce", "reduce_scatter", "allgather",
                                                "broadcast", "reduce",         "alltoall",
                                                "sendrecv",  "barrier"};
// The collective each kind sets an algorithm for (send/recv has none).
constexpr int kCollectiveOf[kKindCount] = {HM_COLL_ALLREDUCE,
                                           HM_COLL_REDUCE_SCATTER,
                                           HM_COLL_ALLGATHER,
                                           HM_COLL_BROADCAST,
                                           HM_COLL_REDUCE,
                                           HM_COLL_ALLTOALL,
                                           -1,
                                           HM_COLL_BARRIER};
constexpr hm_dtype_t kDtypes[] = {HM_INT8,   HM_UINT8,   HM_INT32,    HM_UINT32,  HM_INT64,
                                  HM_UINT64, HM_FLOAT16, HM_BFLOAT16, HM_FLOAT32, HM_FLOAT64};
constexpr const char* kDtypeNames[] = {"int8",   "uint8",   "int32",    "uint32",  "int64",
                                       "uint64", "float16", "bfloat16", "float32", "float64"};
constexpr const char* kOpNames[] = {"sum", "prod", "min", "max", "avg"};

struct Options {
  double seconds = 10;
  std::uint64_t seed = 1;
  std::size_t max_bytes = 4u << 20;  // the largest buffer one operation touches
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds") {
      o.seconds = std::atof(argv[i + 1]);
    } else if (flag == "--seed") {
      o.seed = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (flag == "--max-bytes") {
      o.max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    } else {
      std::fprintf(stderr, "holmes-soak: unknown flag %s\n", argv[i]);
      std::exit(2);
    }
  }
  return o;
}

// One operation, the same on every rank.
struct Operation {
  Kind kind = kBarrier;
  int dtype_index = 0;
  hm_op_t op = HM_SUM;
  std::size_t count = 0;  // per rank block for reduce_scatter, allgather and alltoall
  int root = 0;
  bool in_place = false;
  bool nonblocking = false;
  hm_algorithm_t algorithm = HM_ALGO_AUTO;
  unsigned salt = 0;

  hm_dtype_t dtype() const { return kDtypes[dtype_index]; }
  std::string describe() const {
    char text[256];
    std::snprintf(text, sizeof text, "%s %s %s count %zu root %d %s %s algorithm %s salt %u",
                  kKindNames[kind], kDtypeNames[dtype_index], kOpNames[op], count, root,
                  in_place ? "in-place" : "out-of-place", nonblocking ? "nonblocking" : "blocking",
                  hm_algorithm_name(algorithm), salt);
    return text;
  }
};

class Soak {
 public:
  Soak(hm_comm_t world, const Options& options) : world_(world), options_(options) {
    hm_comm_rank(world, &rank_);
    hm_comm_size(world, &size_);
    rng_.seed(options.seed);
    // The algorithms each collective accepts on this communicator, auto first.
    for (int kind = 0; kind < kKindCount; ++kind) {
      algorithms_[kind].push_back(HM_ALGO_AUTO);
      if (kCollectiveOf[kind] < 0) continue;
      const auto coll = static_cast<hm_collective_t>(kCollectiveOf[kind]);
      for (int a = 1; a < HM_ALGORITHM_COUNT; ++a) {
        const auto algo = static_cast<hm_algorithm_t>(a);
        if (hm_comm_set_algorithm(world, coll, algo) == HM_SUCCESS)
          algorithms_[kind].push_back(algo);
      }
      hm_comm_set_algorithm(world, coll, HM_ALGO_AUTO);
    }
  }

  void print_algorithms() const {
    for (int kind = 0; kind < kKindCount; ++kind) {
      std::string names;
      for (auto a : algorithms_[kind]) names += std::string(" ") + hm_algorithm_name(a);
      std::printf("soak: %-14s algorithms:%s\n", kKindNames[kind], names.c_str());
    }
  }

  Operation draw(std::uint64_t iteration) {
    Operation o;
    o.kind = static_cast<Kind>(below(kKindCount));
    if (o.kind == kSendRecv && size_ == 1) o.kind = kAllreduce;
    o.dtype_index = static_cast<int>(below(std::size(kDtypes)));
    o.op = static_cast<hm_op_t>(below(HM_OP_COUNT));
    o.root = static_cast<int>(below(static_cast<std::uint64_t>(size_)));
    o.in_place = below(2) == 0;
    o.nonblocking = below(4) == 0;
    const auto& algos = algorithms_[o.kind];
    o.algorithm = algos[below(algos.size())];
    o.salt = static_cast<unsigned>(iteration % 997);
    // Sizes: mostly small and medium (where algorithms change), sometimes up to max_bytes.
    const std::size_t es = element_size(o.dtype());
    const std::size_t blocks =
        (o.kind == kReduceScatter || o.kind == kAllgather || o.kind == kAlltoall)
            ? static_cast<std::size_t>(size_)
            : 1;
    const std::size_t cap = std::max<std::size_t>(1, options_.max_bytes / es / blocks);
    const std::uint64_t size_class = below(20);
    std::size_t limit = 64;
    if (size_class >= 8) limit = 16384;
    if (size_class >= 15) limit = 262144;
    if (size_class >= 19) limit = cap + 1;
    o.count = static_cast<std::size_t>(below(std::min(limit, cap + 1)));
    return o;
  }

  // Runs and checks one operation; false when a call failed (the job cannot go on).
  bool run(const Operation& o) {
    if (kCollectiveOf[o.kind] >= 0) {
      const hm_status_t s = hm_comm_set_algorithm(
          world_, static_cast<hm_collective_t>(kCollectiveOf[o.kind]), o.algorithm);
      if (s != HM_SUCCESS) return failed(o, "hm_comm_set_algorithm", s);
    }
    switch (o.kind) {
      case kAllreduce:
        return allreduce(o);
      case kReduceScatter:
        return reduce_scatter(o);
      case kAllgather:
        return allgather(o);
      case kBroadcast:
        return broadcast(o);
      case kReduce:
        return reduce(o);
      case kAlltoall:
        return alltoall(o);
      case kSendRecv:
        return sendrecv(o);
      case kBarrier:
        return finish(o, "barrier", o.nonblocking ? start_barrier() : hm_barrier(world_));
      case kKindCount:
        break;
    }
    return true;
  }

  std::uint64_t operations() const { return operations_; }
  std::uint64_t wrong_operations() const { return wrong_operations_; }
  std::uint64_t bytes_checked() const { return bytes_checked_; }
  const std::array<std::uint64_t, kKindCount>& per_kind() const { return per_kind_; }

 private:
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  static std::size_t element_size(hm_dtype_t dtype) {
    std::size_t bytes = 0;
    hm_dtype_size(dtype, &bytes);
    return bytes;
  }
  Bytes buffer(const Operation& o, std::size_t count) const {
    return Bytes(count * element_size(o.dtype()), 0x7d);  // a marker no expected value equals
  }
  unsigned char* block(Bytes& b, const Operation& o, std::size_t index) const {
    return b.data() + index * o.count * element_size(o.dtype());
  }

  bool failed(const Operation& o, const char* what, hm_status_t s) {
    std::fprintf(stderr, "soak: rank %d: %s failed with %s on %s: %s\n", rank_, what,
                 hm_status_string(s), o.describe().c_str(), hm_last_error_message());
    return false;
  }

  hm_status_t start_barrier() {
    hm_request_t request = nullptr;
    const hm_status_t s = hm_ibarrier(world_, &request);
    return s != HM_SUCCESS ? s : hm_wait(&request);
  }

  // The status of a blocking call, or of a nonblocking one's wait.
  bool finish(const Operation& o, const char* what, hm_status_t s) {
    if (s != HM_SUCCESS) return failed(o, what, s);
    ++operations_;
    ++per_kind_[o.kind];
    return true;
  }

  // Issues through `issue(request*)` when nonblocking (then waits), or `blocking()`.
  template <typename Blocking, typename Issue>
  hm_status_t invoke(const Operation& o, Blocking blocking, Issue issue) {
    if (!o.nonblocking) return blocking();
    hm_request_t request = nullptr;
    const hm_status_t s = issue(&request);
    return s != HM_SUCCESS ? s : hm_wait(&request);
  }

  void check(const Operation& o, const unsigned char* got, const unsigned char* expected,
             std::size_t count, const char* part) {
    const std::size_t wrong = holmes::check::count_wrong(got, expected, count, o.dtype());
    bytes_checked_ += count * element_size(o.dtype());
    if (wrong == 0) return;
    if (++wrong_reports_ <= 20) {
      std::fprintf(stderr, "soak: rank %d: %zu of %zu elements wrong (%s) after %s\n", rank_, wrong,
                   count, part, o.describe().c_str());
    }
    wrong_now_ = true;
  }
  void close_check() {
    if (wrong_now_) ++wrong_operations_;
    wrong_now_ = false;
  }

  bool allreduce(const Operation& o) {
    const auto dt = o.dtype();
    Bytes send = buffer(o, o.count), recv = buffer(o, o.count), expected = buffer(o, o.count);
    holmes::check::fill_input(send.data(), dt, o.op, rank_, 0, o.count, o.salt);
    holmes::check::fill_expected(expected.data(), dt, o.op, size_, 0, o.count, o.salt);
    unsigned char* out = o.in_place ? send.data() : recv.data();
    const hm_status_t s = invoke(
        o, [&] { return hm_allreduce(world_, send.data(), out, o.count, dt, o.op); },
        [&](hm_request_t* r) {
          return hm_iallreduce(world_, send.data(), out, o.count, dt, o.op, r);
        });
    if (!finish(o, "allreduce", s)) return false;
    check(o, out, expected.data(), o.count, "result");
    close_check();
    return true;
  }

  bool reduce_scatter(const Operation& o) {
    const auto dt = o.dtype();
    const auto n = static_cast<std::size_t>(size_);
    Bytes send = buffer(o, o.count * n), recv = buffer(o, o.count), expected = buffer(o, o.count);
    holmes::check::fill_input(send.data(), dt, o.op, rank_, 0, o.count * n, o.salt);
    holmes::check::fill_expected(expected.data(), dt, o.op, size_, o.count * rank_, o.count,
                                 o.salt);
    unsigned char* out = o.in_place ? block(send, o, rank_) : recv.data();
    const hm_status_t s = invoke(
        o, [&] { return hm_reduce_scatter(world_, send.data(), out, o.count, dt, o.op); },
        [&](hm_request_t* r) {
          return hm_ireduce_scatter(world_, send.data(), out, o.count, dt, o.op, r);
        });
    if (!finish(o, "reduce_scatter", s)) return false;
    check(o, out, expected.data(), o.count, "own block");
    close_check();
    return true;
  }

  // Rank r's contribution to allgather, broadcast, alltoall and send/recv: its sum inputs at
  // `offset`.
  void contribution(const Operation& o, unsigned char* out, int r, std::size_t offset) const {
    holmes::check::fill_input(out, o.dtype(), HM_SUM, r, offset, o.count, o.salt);
  }

  bool allgather(const Operation& o) {
    const auto dt = o.dtype();
    const auto n = static_cast<std::size_t>(size_);
    Bytes send = buffer(o, o.count), recv = buffer(o, o.count * n),
          expected = buffer(o, o.count * n);
    for (int r = 0; r < size_; ++r) contribution(o, block(expected, o, r), r, 0);
    const unsigned char* in = send.data();
    if (o.in_place) {
      contribution(o, block(recv, o, rank_), rank_, 0);
      in = block(recv, o, rank_);
    } else {
      contribution(o, send.data(), rank_, 0);
    }
    const hm_status_t s = invoke(
        o, [&] { return hm_allgather(world_, in, recv.data(), o.count, dt); },
        [&](hm_request_t* r) { return hm_iallgather(world_, in, recv.data(), o.count, dt, r); });
    if (!finish(o, "allgather", s)) return false;
    check(o, recv.data(), expected.data(), o.count * n, "all blocks");
    close_check();
    return true;
  }

  bool broadcast(const Operation& o) {
    const auto dt = o.dtype();
    Bytes buf = buffer(o, o.count), expected = buffer(o, o.count);
    contribution(o, expected.data(), o.root, 0);
    if (rank_ == o.root) contribution(o, buf.data(), o.root, 0);
    const hm_status_t s = invoke(
        o, [&] { return hm_broadcast(world_, buf.data(), o.count, dt, o.root); },
        [&](hm_request_t* r) { return hm_ibroadcast(world_, buf.data(), o.count, dt, o.root, r); });
    if (!finish(o, "broadcast", s)) return false;
    check(o, buf.data(), expected.data(), o.count, "buffer");
    close_check();
    return true;
  }

  bool reduce(const Operation& o) {
    const auto dt = o.dtype();
    Bytes send = buffer(o, o.count), recv = buffer(o, o.count), expected = buffer(o, o.count);
    holmes::check::fill_input(send.data(), dt, o.op, rank_, 0, o.count, o.salt);
    holmes::check::fill_expected(expected.data(), dt, o.op, size_, 0, o.count, o.salt);
    const Bytes untouched = recv;
    unsigned char* out = o.in_place ? send.data() : recv.data();
    const hm_status_t s = invoke(
        o, [&] { return hm_reduce(world_, send.data(), out, o.count, dt, o.op, o.root); },
        [&](hm_request_t* r) {
          return hm_ireduce(world_, send.data(), out, o.count, dt, o.op, o.root, r);
        });
    if (!finish(o, "reduce", s)) return false;
    if (rank_ == o.root) {
      check(o, out, expected.data(), o.count, "root's result");
    } else if (!o.in_place) {
      check(o, recv.data(), untouched.data(), o.count, "non-root recvbuf left alone");
    }
    close_check();
    return true;
  }

  bool alltoall(const Operation& o) {
    const auto dt = o.dtype();
    const auto n = static_cast<std::size_t>(size_);
    Bytes send = buffer(o, o.count * n), recv = buffer(o, o.count * n),
          expected = buffer(o, o.count * n);
    // Block j of rank r: r's inputs at offset j * count, so every block is distinct.
    for (int j = 0; j < size_; ++j) contribution(o, block(send, o, j), rank_, o.count * j);
    for (int i = 0; i < size_; ++i) contribution(o, block(expected, o, i), i, o.count * rank_);
    unsigned char* out = o.in_place ? send.data() : recv.data();
    const hm_status_t s = invoke(
        o, [&] { return hm_alltoall(world_, send.data(), out, o.count, dt); },
        [&](hm_request_t* r) { return hm_ialltoall(world_, send.data(), out, o.count, dt, r); });
    if (!finish(o, "alltoall", s)) return false;
    check(o, out, expected.data(), o.count * n, "all blocks");
    close_check();
    return true;
  }

  // A ring shift: every rank sends to the next and receives from the previous, the receive
  // posted first when `in_place` says so (both orders must work).
  bool sendrecv(const Operation& o) {
    const auto dt = o.dtype();
    const int next = (rank_ + 1) % size_;
    const int prev = (rank_ + size_ - 1) % size_;
    Bytes send = buffer(o, o.count), recv = buffer(o, o.count), expected = buffer(o, o.count);
    contribution(o, send.data(), rank_, 0);
    contribution(o, expected.data(), prev, 0);
    hm_request_t sreq = nullptr, rreq = nullptr;
    hm_status_t s = HM_SUCCESS;
    if (o.in_place) {
      s = hm_irecv(world_, recv.data(), o.count, dt, prev, &rreq);
      if (s == HM_SUCCESS) s = hm_isend(world_, send.data(), o.count, dt, next, &sreq);
    } else {
      s = hm_isend(world_, send.data(), o.count, dt, next, &sreq);
      if (s == HM_SUCCESS) s = hm_irecv(world_, recv.data(), o.count, dt, prev, &rreq);
    }
    if (s == HM_SUCCESS) s = hm_wait(&sreq);
    if (s == HM_SUCCESS) s = hm_wait(&rreq);
    if (!finish(o, "send/recv", s)) return false;
    check(o, recv.data(), expected.data(), o.count, "received");
    close_check();
    return true;
  }

  hm_comm_t world_;
  Options options_;
  int rank_ = 0;
  int size_ = 1;
  std::mt19937_64 rng_;
  std::array<std::vector<hm_algorithm_t>, kKindCount> algorithms_;
  std::array<std::uint64_t, kKindCount> per_kind_{};
  std::uint64_t operations_ = 0;
  std::uint64_t wrong_operations_ = 0;
  std::uint64_t bytes_checked_ = 0;
  std::uint64_t wrong_reports_ = 0;
  bool wrong_now_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  hm_comm_t world = nullptr;
  if (hm_init_from_env(&world) != HM_SUCCESS) {
    std::fprintf(stderr, "soak: cannot create the world: %s\n", hm_last_error_message());
    return 2;
  }
  int rank = 0;
  int size = 1;
  hm_comm_rank(world, &rank);
  hm_comm_size(world, &size);
  // Rank 0's clock decides when to stop; the decision travels on a communicator of its own.
  hm_comm_t control = nullptr;
  if (hm_comm_split(world, 0, rank, &control) != HM_SUCCESS) {
    std::fprintf(stderr, "soak: cannot split the control communicator: %s\n",
                 hm_last_error_message());
    return 2;
  }
  const char* transport = "self";
  const char* reason = "";
  if (size > 1) hm_comm_peer_transport(world, (rank + 1) % size, &transport, &reason);

  Soak soak(world, options);
  if (rank == 0) {
    std::printf("soak: %d ranks, transport %s (%s), seed %llu, %.0f s, buffers up to %zu bytes\n",
                size, transport, reason, static_cast<unsigned long long>(options.seed),
                options.seconds, options.max_bytes);
    soak.print_algorithms();
  }
  const auto start = Clock::now();
  int exit_code = 0;
  for (std::uint64_t iteration = 0;; ++iteration) {
    std::uint8_t go = 0;
    if (rank == 0) {
      go = std::chrono::duration<double>(Clock::now() - start).count() < options.seconds ? 1 : 0;
    }
    if (hm_broadcast(control, &go, 1, HM_UINT8, 0) != HM_SUCCESS) {
      std::fprintf(stderr, "soak: rank %d: control broadcast failed: %s\n", rank,
                   hm_last_error_message());
      return 2;
    }
    if (go == 0) break;
    const Operation o = soak.draw(iteration);
    if (!soak.run(o)) {
      hm_comm_abort(world);
      hm_comm_abort(control);
      return 2;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // Totals over all ranks.
  std::array<std::uint64_t, 3> totals = {soak.operations(), soak.wrong_operations(),
                                         soak.bytes_checked()};
  std::array<std::uint64_t, 3> sums{};
  if (hm_allreduce(control, totals.data(), sums.data(), totals.size(), HM_UINT64, HM_SUM) !=
      HM_SUCCESS) {
    std::fprintf(stderr, "soak: final allreduce failed: %s\n", hm_last_error_message());
    return 2;
  }
  if (rank == 0) {
    std::string kinds;
    for (int k = 0; k < kKindCount; ++k) {
      kinds +=
          std::string(k ? ", " : "") + kKindNames[k] + " " + std::to_string(soak.per_kind()[k]);
    }
    std::printf(
        "soak: %llu operations per rank in %.1f s (%s); %llu rank-operations, %.1f MB "
        "checked, %llu wrong\n",
        static_cast<unsigned long long>(soak.operations()), seconds, kinds.c_str(),
        static_cast<unsigned long long>(sums[0]), static_cast<double>(sums[2]) / 1e6,
        static_cast<unsigned long long>(sums[1]));
  }
  if (sums[1] != 0) exit_code = 1;
  hm_comm_destroy(control);
  hm_comm_destroy(world);
  return exit_code;
}
