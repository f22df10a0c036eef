// The NCCL engine: the blockwise decomposition (blockwise.hpp) on an NCCL communicator of the
// group, made on the group's first call with the unique id handed round through the job's store.
// NCCL is loaded at run time, and every wait on it is bounded: NCCL runs non-blocking (its config
// `blocking = 0`) and the engine polls its state and the device with growing sleeps until the
// communicator's timeout, then aborts the NCCL communicator and fails with HM_ERR_TIMEOUT.
#include "collectives/engine/nccl_engine.hpp"

#include <string>

#include "core/status.hpp"

#if defined(HOLMES_HAVE_NCCL)
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <thread>

#include "collectives/engine/blockwise.hpp"
#include "core/clock.hpp"
#include "core/cuda/cuda_api.hpp"
#include "core/cuda/memory.hpp"
#include "core/text.hpp"
#endif

namespace holmes {

#if defined(HOLMES_HAVE_NCCL)
namespace {

// The NCCL functions the engine calls, from libnccl.so.2.
struct NcclApi {
  ncclResult_t (*get_version)(int*) = nullptr;
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank_config)(ncclComm_t*, int, ncclUniqueId, int,
                                        ncclConfig_t*) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  ncclResult_t (*reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t) = nullptr;
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t) = nullptr;
  const char* (*get_error_string)(ncclResult_t) = nullptr;
  int version = 0;
  bool loaded = false;
  std::string why_not;
};

template <typename Fn>
bool find(void* library, const char* name, Fn* fn, std::string* why) {
  *fn = reinterpret_cast<Fn>(::dlsym(library, name));
  if (*fn == nullptr) *why = fmt::format("libnccl.so.2 has no {}", name);
  return *fn != nullptr;
}

NcclApi load() {
  NcclApi api;
  std::string why;
  if (!cuda_device_available(&why)) {
    api.why_not = "no usable CUDA device: " + why;
    return api;
  }
  // The loader's path first, then the toolkit Holmes was built against (NCCL often lives there,
  // off the loader's path). The handle is never closed: NCCL stays loaded for the process.
  void* library = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    library = ::dlopen(HOLMES_NCCL_LIBRARY_DIR "/libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  }
  if (library == nullptr) {
    api.why_not =
        fmt::format("libnccl.so.2 is not on the loader's path nor in {}", HOLMES_NCCL_LIBRARY_DIR);
    return api;
  }
  if (!find(library, "ncclGetVersion", &api.get_version, &api.why_not) ||
      !find(library, "ncclGetUniqueId", &api.get_unique_id, &api.why_not) ||
      !find(library, "ncclCommInitRankConfig", &api.comm_init_rank_config, &api.why_not) ||
      !find(library, "ncclCommDestroy", &api.comm_destroy, &api.why_not) ||
      !find(library, "ncclCommAbort", &api.comm_abort, &api.why_not) ||
      !find(library, "ncclCommGetAsyncError", &api.comm_get_async_error, &api.why_not) ||
      !find(library, "ncclGroupStart", &api.group_start, &api.why_not) ||
      !find(library, "ncclGroupEnd", &api.group_end, &api.why_not) ||
      !find(library, "ncclReduce", &api.reduce, &api.why_not) ||
      !find(library, "ncclBroadcast", &api.broadcast, &api.why_not) ||
      !find(library, "ncclGetErrorString", &api.get_error_string, &api.why_not)) {
    return api;
  }
  // ncclConfig_t as this build knows it (netName, blocking) came with NCCL 2.14.
  if (api.get_version(&api.version) != ncclSuccess || api.version < NCCL_VERSION(2, 14, 0)) {
    api.why_not =
        fmt::format("libnccl.so.2 is version {}; the engine needs 2.14 or newer", api.version);
    return api;
  }
  api.loaded = true;
  return api;
}

const NcclApi& nccl() {
  static const NcclApi api = load();  // immutable once loaded
  return api;
}

ncclDataType_t nccl_type(hm_dtype_t dtype) {
  switch (dtype) {
    case HM_INT8:
      return ncclInt8;
    case HM_UINT8:
      return ncclUint8;
    case HM_INT32:
      return ncclInt32;
    case HM_UINT32:
      return ncclUint32;
    case HM_INT64:
      return ncclInt64;
    case HM_UINT64:
      return ncclUint64;
    case HM_FLOAT16:
      return ncclFloat16;
    case HM_BFLOAT16:
      return ncclBfloat16;
    case HM_FLOAT32:
      return ncclFloat32;
    case HM_FLOAT64:
      return ncclFloat64;
    default:
      fail(HM_ERR_INVALID_ARGUMENT, "nccl engine: dtype {} has no NCCL type",
           static_cast<int>(dtype));
  }
}

// AVG sums: the engine divides where the sum is complete, as Holmes's engines do.
ncclRedOp_t nccl_op(hm_op_t op) {
  switch (op) {
    case HM_SUM:
    case HM_AVG:
      return ncclSum;
    case HM_PROD:
      return ncclProd;
    case HM_MIN:
      return ncclMin;
    case HM_MAX:
      return ncclMax;
    default:
      fail(HM_ERR_INVALID_ARGUMENT, "nccl engine: op {} has no NCCL op", static_cast<int>(op));
  }
}

std::string to_hex(const ncclUniqueId& id) {
  return holmes::to_hex(std::as_bytes(std::span(id.internal)));
}

ncclUniqueId from_hex(const std::string& text) {
  ncclUniqueId id{};
  if (!holmes::from_hex(text, std::as_writable_bytes(std::span(id.internal)))) {
    fail(HM_ERR_TRANSPORT, "nccl engine: the group's unique id is not {} hex digits: '{}'",
         2 * sizeof(id.internal), printable(text.substr(0, 2 * sizeof(id.internal) + 8)));
  }
  return id;
}

class NcclEngine final : public GroupEngine {
 public:
  explicit NcclEngine(NcclGroupSetup setup) : setup_(std::move(setup)) {}
  ~NcclEngine() override {
    if (comm_ == nullptr) return;
    if (healthy_) {
      nccl().comm_destroy(comm_);
    } else {
      nccl().comm_abort(comm_);
    }
  }

  std::string_view name() const override { return "nccl"; }

  void reduce_scatter_blocks(CollectiveContext& group, const std::byte* in, std::byte* own_out,
                             const BlockLayout& layout, hm_dtype_t dtype, hm_op_t op,
                             int average_over) override {
    Calls calls(*this, device_of(in));
    blockwise_reduce_scatter(calls, group.rank(), in, own_out, layout, dtype, op, average_over);
    if (op == HM_AVG && average_over > 1) {
      const std::size_t own = layout.block_size(group.rank());
      if (own > 0) group.finalize_average(dtype, own_out, own, average_over);
    }
  }
  void allgather_blocks(CollectiveContext& group, std::byte* buffer, const BlockLayout& layout,
                        hm_dtype_t dtype) override {
    (void)group;
    Calls calls(*this, device_of(buffer));
    blockwise_allgather(calls, buffer, layout, dtype);
  }
  // The island's part of a hierarchical broadcast of device buffers: one ncclBroadcast of the
  // bytes from the group's position `root` (the NCCL communicator's ranks are the positions).
  bool broadcast(CollectiveContext& group, std::byte* buffer, std::size_t bytes,
                 int root) override {
    (void)group;
    Calls calls(*this, device_of(buffer));
    calls.begin();
    calls.broadcast(buffer, bytes, HM_UINT8, root);
    calls.end();
    return true;
  }

 private:
  // One batch of NCCL calls on the calling thread's stream of `device`.
  class Calls final : public BlockCalls {
   public:
    Calls(NcclEngine& engine, int device)
        : engine_(engine), guard_(device), stream_(cuda::thread_stream(device)) {
      engine_.connect();
    }
    void begin() override { engine_.check(nccl().group_start(), "ncclGroupStart"); }
    void end() override {
      engine_.settle(nccl().group_end(), "ncclGroupEnd");
      engine_.wait_for(stream_);
    }
    void reduce(const std::byte* in, std::byte* out, std::size_t count, hm_dtype_t dtype,
                hm_op_t op, int root, int average_over) override {
      (void)average_over;  // divided after the batch (reduce_scatter_blocks)
      engine_.check(nccl().reduce(in, out, count, nccl_type(dtype), nccl_op(op), root,
                                  engine_.comm_, stream_.stream),
                    "ncclReduce");
    }
    void broadcast(std::byte* buffer, std::size_t count, hm_dtype_t dtype, int root) override {
      engine_.check(nccl().broadcast(buffer, buffer, count, nccl_type(dtype), root, engine_.comm_,
                                     stream_.stream),
                    "ncclBroadcast");
    }

   private:
    NcclEngine& engine_;
    cuda::DeviceGuard guard_;
    cuda::ThreadStream& stream_;
  };

  static int device_of(const void* p) {
    const int device = memory_device(p);
    if (device < 0) fail(HM_ERR_INVALID_ARGUMENT, "nccl engine: a buffer is not device memory");
    return device;
  }

  // The group's communicator, made on the first call on the current device.
  void connect() {
    if (comm_ != nullptr) return;
    std::string mine;
    if (setup_.position == 0) {
      ncclUniqueId id{};
      check(nccl().get_unique_id(&id), "ncclGetUniqueId");
      mine = to_hex(id);
    }
    const ncclUniqueId id = from_hex(setup_.share_id(mine));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every wait is Holmes's, bounded by the timeout
    if (!setup_.net_name.empty()) config.netName = setup_.net_name.c_str();
    const auto ranks = static_cast<int>(setup_.members.size());
    settle(nccl().comm_init_rank_config(&comm_, ranks, id, setup_.position, &config),
           "ncclCommInitRankConfig");
  }

  void check(ncclResult_t result, const char* what) {
    if (result == ncclSuccess || result == ncclInProgress) return;
    healthy_ = false;
    fail(HM_ERR_TRANSPORT, "nccl engine: {} failed: {} (NCCL {})", what,
         nccl().get_error_string(result), static_cast<int>(result));
  }

  // A non-blocking NCCL call's result: polls the communicator until it is no longer in progress.
  void settle(ncclResult_t result, const char* what) {
    check(result, what);
    if (comm_ == nullptr) return;
    poll_until(what, [&] {
      ncclResult_t state = ncclSuccess;
      check(nccl().comm_get_async_error(comm_, &state), "ncclCommGetAsyncError");
      if (state == ncclInProgress) return false;
      check(state, what);
      return true;
    });
  }

  // Waits for the batch on `stream`, bounded by the timeout; an NCCL error fails it at once.
  void wait_for(cuda::ThreadStream& stream) {
    cuda::check(cudaEventRecord(stream.done, stream.stream), "nccl engine: recording the batch");
    poll_until("the NCCL batch", [&] {
      const cudaError_t state = cudaEventQuery(stream.done);
      if (state == cudaSuccess) return true;
      if (state != cudaErrorNotReady) cuda::check(state, "nccl engine: the batch on the device");
      ncclResult_t async = ncclSuccess;
      check(nccl().comm_get_async_error(comm_, &async), "ncclCommGetAsyncError");
      if (async != ncclInProgress) check(async, "an NCCL operation");
      return false;
    });
  }

  // Calls `done` until it says so, with sleeps growing from 10 us to 1 ms between; past the
  // communicator's timeout the engine is unhealthy (aborted when destroyed) and the wait fails.
  template <typename Done>
  void poll_until(const char* what, Done done) {
    const Deadline deadline = Deadline::after(setup_.timeout);
    GrowingPause pause(std::chrono::microseconds(10), std::chrono::microseconds(1000));
    while (!done()) {
      if (deadline.expired()) {
        healthy_ = false;
        fail(HM_ERR_TIMEOUT, "nccl engine: {} did not finish within {} ms", what,
             setup_.timeout.count());
      }
      pause.sleep(deadline);
    }
  }

  NcclGroupSetup setup_;
  ncclComm_t comm_ = nullptr;
  bool healthy_ = true;
};

}  // namespace

bool nccl_usable(std::string* why) {
  const NcclApi& api = nccl();
  if (!api.loaded && why != nullptr) *why = api.why_not;
  return api.loaded;
}

std::unique_ptr<GroupEngine> make_nccl_engine(NcclGroupSetup setup) {
  std::string why;
  if (!nccl_usable(&why)) fail(HM_ERR_UNSUPPORTED, "the NCCL engine cannot run here: {}", why);
  return std::make_unique<NcclEngine>(std::move(setup));
}

#else

bool nccl_usable(std::string* why) {
  if (why != nullptr) *why = "Holmes was built without NCCL (HOLMES_WITH_NCCL)";
  return false;
}

std::unique_ptr<GroupEngine> make_nccl_engine(NcclGroupSetup setup) {
  (void)setup;
  fail(HM_ERR_UNSUPPORTED,
       "the NCCL engine cannot run here: Holmes was built without NCCL "
       "(HOLMES_WITH_NCCL)");
}

#endif

}  // namespace holmes
