#include "process_group_holmes.hpp"

#include <Python.h>
#include <c10/util/Exception.h>

#include <memory>
#include <numeric>
#include <utility>

#ifdef HOLMES_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "reduction.hpp"
#include "torch_store.hpp"

namespace holmes::torch_backend {
namespace {

// The tag of the point-to-point messages the backend's own gathers, scatters and uneven
// all-to-alls are made of. Every rank issues those in the same order, so one tag suffices: the
// n-th such message between two ranks is the n-th one each of them posted.
constexpr std::uint32_t kBlockTag = static_cast<std::uint32_t>(kMaxUserTag) + 1;

void check_device(const char* op, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), "holmes backend: ", op, " got an undefined tensor");
  TORCH_CHECK(t.layout() == c10::kStrided, "holmes backend: ", op,
              " takes dense tensors, got layout ", t.layout());
  TORCH_CHECK(t.device().is_cpu() || t.device().is_cuda(), "holmes backend: ", op,
              " takes CPU or CUDA tensors, got one on ", t.device());
}

const at::Tensor& single(const char* op, const std::vector<at::Tensor>& tensors) {
  TORCH_CHECK(tensors.size() == 1, "holmes backend: ", op, " takes one tensor per process, got ",
              tensors.size());
  check_device(op, tensors[0]);
  return tensors[0];
}

void check_alike(const char* op, const at::Tensor& t, const at::Tensor& like, const char* which,
                 std::size_t index) {
  check_device(op, t);
  TORCH_CHECK(t.scalar_type() == like.scalar_type() && t.device() == like.device(),
              "holmes backend: ", op, ": ", which, " ", index, " is ", t.scalar_type(), " on ",
              t.device(), ", the input ", like.scalar_type(), " on ", like.device());
}

// Device buffers: Holmes reads and writes them once the work already queued on the caller's
// stream is done (the host waits for it; Holmes's own copies are synchronous, so work queued
// after wait() sees the result).
void order_after_stream(const at::Tensor& t) {
#ifdef HOLMES_TORCH_CUDA
  if (t.is_cuda()) c10::cuda::getCurrentCUDAStream(t.device().index()).synchronize();
#else
  TORCH_CHECK(!t.is_cuda(), "holmes backend: this build of the backend has no CUDA support");
#endif
}

// A contiguous tensor over t's elements: t itself or a copy (which the caller copies back).
at::Tensor dense(const at::Tensor& t) {
  at::Tensor out = t.is_contiguous() ? t : t.contiguous();
  order_after_stream(out);
  return out;
}

// Runs `then` after the work's finish so far.
void add_finish(HolmesWork& work, std::function<void()> then) {
  if (!work.finish) {
    work.finish = std::move(then);
    return;
  }
  work.finish = [first = std::move(work.finish), then = std::move(then)] {
    first();
    then();
  };
}

// When `buffer` is a copy of `target`, the result goes back into target at the end.
void copy_back(HolmesWork& work, const at::Tensor& target, const at::Tensor& buffer) {
  work.keep.push_back(buffer);
  if (buffer.is_same(target)) return;
  add_finish(work, [target, buffer] { target.copy_(buffer.view(target.sizes())); });
}

// Tensors that lie one after another in memory, in order, each contiguous: one buffer of them
// all, which Holmes can fill or read without a copy.
bool adjacent(const std::vector<at::Tensor>& list) {
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_contiguous()) return false;
    if (i == 0) continue;
    const auto* end = static_cast<const char*>(list[i - 1].data_ptr()) + list[i - 1].nbytes();
    if (list[i].data_ptr() != end) return false;
  }
  return true;
}

// The list's elements in one flat tensor (a copy).
at::Tensor flatten(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> rows;
  rows.reserve(list.size());
  for (const auto& t : list) rows.push_back(t.reshape({-1}));
  at::Tensor flat = at::cat(rows);
  order_after_stream(flat);
  return flat;
}

// Copies consecutive pieces of `flat` into the list's tensors.
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& list) {
  int64_t offset = 0;
  for (const auto& t : list) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

int checked_root(const char* op, int64_t root, int size) {
  TORCH_CHECK(root >= 0 && root < size, "holmes backend: ", op, ": root ", root, " is outside [0, ",
              size, ")");
  return static_cast<int>(root);
}

// Rows of dim 0 per rank: the given splits, or an even split when none are given.
std::vector<int64_t> rows_per_rank(const char* op, const char* which, const at::Tensor& t,
                                   const std::vector<int64_t>& splits, int size) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "holmes backend: ", op, ": the ", which, " has ", rows,
                " rows, not divisible by the group's ", size, " ranks");
    return std::vector<int64_t>(static_cast<std::size_t>(size), rows / size);
  }
  TORCH_CHECK(splits.size() == static_cast<std::size_t>(size), "holmes backend: ", op, ": ",
              splits.size(), " ", which, " splits for a group of ", size);
  for (const auto s : splits) {
    TORCH_CHECK(s >= 0, "holmes backend: ", op, ": a negative ", which, " split ", s);
  }
  TORCH_CHECK(std::accumulate(splits.begin(), splits.end(), int64_t{0}) == rows,
              "holmes backend: ", op, ": the ", which, " splits do not add up to its ", rows,
              " rows");
  return splits;
}

// The blocks of `t` along dim 0, `rows[i]` rows each.
std::vector<at::Tensor> blocks_of(const at::Tensor& t, const std::vector<int64_t>& rows) {
  const at::Tensor flat2d = t.dim() == 0 ? t.reshape({1}) : t;
  std::vector<at::Tensor> out;
  int64_t at_row = 0;
  for (const auto r : rows) {
    out.push_back(flat2d.narrow(0, at_row, r));
    at_row += r;
  }
  return out;
}

std::chrono::milliseconds work_bound(std::chrono::milliseconds timeout) {
  return timeout * 2 + std::chrono::seconds(10);
}

}  // namespace

ProcessGroupHolmes::ProcessGroupHolmes(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout)
    : BackendBase(rank, size), timeout_(timeout) {
  TORCH_CHECK(timeout.count() > 0, "holmes backend: the group's timeout must be positive, got ",
              timeout.count(), " ms");
  Config config;
  config.rank = rank;
  config.world_size = size;
  config.timeout = timeout;
  config.kv_store = std::make_shared<TorchStore>(store);
  // Not dialed: the route to the store's host picks the address peers reach this rank at.
  if (auto address = tcp_store_address(store)) config.store = *address;
  try {
    comm_ = Communicator::init(config);
  } catch (const Error& e) {
    TORCH_CHECK(false, "holmes backend: creating the group (rank ", rank, " of ", size,
                ") failed (", hm_status_string(e.status()), "): ", e.what());
  }
  init();
}

ProcessGroupHolmes::ProcessGroupHolmes(Communicator comm, std::chrono::milliseconds timeout)
    : BackendBase(comm.rank(), comm.size()), comm_(std::move(comm)), timeout_(timeout) {
  init();
}

ProcessGroupHolmes::~ProcessGroupHolmes() {
  // Python may drop the group holding the GIL, and the completer may still run a future's
  // callback that takes it (a Python one): let go of it while the completer drains.
  if (Py_IsInitialized() && PyGILState_Check() == 1) {
    PyThreadState* state = PyEval_SaveThread();
    completer_.stop();
    PyEval_RestoreThread(state);
  } else {
    completer_.stop();
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::launch(c10d::OpType type, const char* name,
                                                          std::vector<at::Tensor> outputs,
                                                          const Start& start) {
  // Works the completer is done with end here, on the caller's thread (see Completer).
  const auto finished = completer_.take_finished();
  auto work =
      c10::make_intrusive<HolmesWork>(rank_, type, name, std::move(outputs), work_bound(timeout_));
  {
    std::lock_guard lock(issue_mutex_);
    try {
      start(*work);
    } catch (const Error& e) {
      TORCH_CHECK(false, "holmes backend: ", name, " (", hm_status_string(e.status()),
                  "): ", e.what());
    }
  }
  completer_.submit(work);
  return work;
}

void ProcessGroupHolmes::gather_and_fold(HolmesWork& work, const at::Tensor& input,
                                         c10d::ReduceOp::RedOpType op,
                                         std::function<void(const at::Tensor&)> apply) {
  const at::Tensor flat = input.reshape({-1});
  at::Tensor gathered = at::empty({size_, flat.numel()}, flat.options());
  const Carrier c = carrier_of(flat);
  work.requests.push_back(comm_.iallgather(flat.data_ptr(), gathered.data_ptr(), c.count, c.dtype));
  work.keep.push_back(flat);
  work.keep.push_back(gathered);
  add_finish(work, [gathered, op, apply = std::move(apply)] { apply(fold_bitwise(gathered, op)); });
}

void ProcessGroupHolmes::post_send(HolmesWork& work, const at::Tensor& block, int peer,
                                   std::uint32_t tag) {
  const at::Tensor b = dense(block);
  const Carrier c = carrier_of(b);
  work.requests.push_back(comm_.isend(b.data_ptr(), c.count, c.dtype, peer, tag));
  work.keep.push_back(b);
}

void ProcessGroupHolmes::post_recv(HolmesWork& work, const at::Tensor& block, int peer,
                                   std::uint32_t tag) {
  const at::Tensor b = dense(block);
  const Carrier c = carrier_of(b);
  work.requests.push_back(comm_.irecv(b.data_ptr(), c.count, c.dtype, peer, tag));
  copy_back(work, block, b);
}

void ProcessGroupHolmes::exchange_blocks(HolmesWork& work,
                                         const std::vector<at::Tensor>& send_blocks,
                                         const std::vector<at::Tensor>& recv_blocks) {
  for (int peer = 0; peer < size_; ++peer) {
    const auto i = static_cast<std::size_t>(peer);
    if (peer == rank_) {
      TORCH_CHECK(send_blocks[i].numel() == recv_blocks[i].numel(),
                  "holmes backend: alltoall: ", send_blocks[i].numel(),
                  " elements to this rank itself, ", recv_blocks[i].numel(), " expected");
      recv_blocks[i].copy_(send_blocks[i].view(recv_blocks[i].sizes()));
      continue;
    }
    post_recv(work, recv_blocks[i], peer, kBlockTag);
    post_send(work, send_blocks[i], peer, kBlockTag);
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::broadcast(std::vector<at::Tensor>& tensors,
                                                             const c10d::BroadcastOptions& opts) {
  const at::Tensor t = single("broadcast", tensors);
  const int root = checked_root("broadcast", opts.rootRank, size_);
  return launch(c10d::OpType::BROADCAST, "broadcast", {t}, [&](HolmesWork& w) {
    const at::Tensor buf = dense(t);
    const Carrier c = carrier_of(buf);
    w.requests.push_back(comm_.ibroadcast(buf.data_ptr(), c.count, c.dtype, root));
    copy_back(w, t, buf);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::allreduce(std::vector<at::Tensor>& tensors,
                                                             const c10d::AllreduceOptions& opts) {
  const at::Tensor t = single("allreduce", tensors);
  const Reduction r = reduction_of("allreduce", t, opts.reduceOp);
  return launch(c10d::OpType::ALLREDUCE, "allreduce", {t}, [&](HolmesWork& w) {
    const at::Tensor buf = dense(t);
    if (r.kind == Reduction::Kind::kBitwise) {
      gather_and_fold(w, buf, r.torch_op,
                      [t](const at::Tensor& all) { t.copy_(all.view(t.sizes())); });
      return;
    }
    w.requests.push_back(comm_.iallreduce(buf.data_ptr(), buf.data_ptr(), r.count, r.dtype, r.op));
    copy_back(w, t, buf);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "holmes backend: allreduce_coalesced got no tensors");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    check_alike("allreduce_coalesced", tensors[i], tensors[0], "tensor", i);
  }
  const std::vector<at::Tensor> list = tensors;
  return launch(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", list, [&](HolmesWork& w) {
    const at::Tensor flat = flatten(list);
    const Reduction r = reduction_of("allreduce_coalesced", flat, opts.reduceOp);
    if (r.kind == Reduction::Kind::kBitwise) {
      gather_and_fold(w, flat, r.torch_op, [list](const at::Tensor& all) { unflatten(all, list); });
      return;
    }
    w.requests.push_back(
        comm_.iallreduce(flat.data_ptr(), flat.data_ptr(), r.count, r.dtype, r.op));
    w.keep.push_back(flat);
    add_finish(w, [flat, list] { unflatten(flat, list); });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::reduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::ReduceOptions& opts) {
  const at::Tensor t = single("reduce", tensors);
  const int root = checked_root("reduce", opts.rootRank, size_);
  const Reduction r = reduction_of("reduce", t, opts.reduceOp);
  return launch(c10d::OpType::REDUCE, "reduce", {t}, [&](HolmesWork& w) {
    const at::Tensor buf = dense(t);
    const bool is_root = rank_ == root;
    if (r.kind == Reduction::Kind::kBitwise) {
      gather_and_fold(w, buf, r.torch_op, [t, is_root](const at::Tensor& all) {
        if (is_root) t.copy_(all.view(t.sizes()));
      });
      return;
    }
    w.requests.push_back(comm_.ireduce(buf.data_ptr(), is_root ? buf.data_ptr() : nullptr, r.count,
                                       r.dtype, r.op, root));
    if (is_root) {
      copy_back(w, t, buf);
    } else {
      w.keep.push_back(buf);
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& /*opts*/) {
  const at::Tensor in = single("allgather", inputs);
  TORCH_CHECK(outputs.size() == 1, "holmes backend: allgather takes one output list, got ",
              outputs.size());
  const std::vector<at::Tensor> list = outputs[0];
  TORCH_CHECK(list.size() == static_cast<std::size_t>(size_), "holmes backend: allgather needs ",
              size_, " output tensors, got ", list.size());
  for (std::size_t i = 0; i < list.size(); ++i) {
    check_alike("allgather", list[i], in, "output tensor", i);
    TORCH_CHECK(list[i].numel() == in.numel(), "holmes backend: allgather: output tensor ", i,
                " has ", list[i].numel(), " elements, the input ", in.numel());
  }
  return launch(c10d::OpType::ALLGATHER, "allgather", list, [&](HolmesWork& w) {
    const at::Tensor src = dense(in);
    const Carrier c = carrier_of(src);
    if (adjacent(list)) {
      order_after_stream(list[0]);
      w.requests.push_back(comm_.iallgather(src.data_ptr(), list[0].data_ptr(), c.count, c.dtype));
      w.keep = list;
      w.keep.push_back(src);
      return;
    }
    at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
    w.requests.push_back(comm_.iallgather(src.data_ptr(), flat.data_ptr(), c.count, c.dtype));
    w.keep.push_back(src);
    w.keep.push_back(flat);
    add_finish(w, [flat, list] { unflatten(flat, list); });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& /*opts*/) {
  check_device("all_gather_into_tensor", input);
  check_alike("all_gather_into_tensor", output, input, "output", 0);
  TORCH_CHECK(output.numel() == input.numel() * size_,
              "holmes backend: all_gather_into_tensor: the output has ", output.numel(),
              " elements, the group's ", size_, " inputs of ", input.numel(), " make ",
              input.numel() * size_);
  const at::Tensor out = output;
  const at::Tensor in = input;
  return launch(c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor", {out}, [&](HolmesWork& w) {
    const at::Tensor src = dense(in);
    const at::Tensor dst = dense(out);
    const Carrier c = carrier_of(src);
    w.requests.push_back(comm_.iallgather(src.data_ptr(), dst.data_ptr(), c.count, c.dtype));
    w.keep.push_back(src);
    copy_back(w, out, dst);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const at::Tensor in = single("gather", inputs);
  const int root = checked_root("gather", opts.rootRank, size_);
  std::vector<at::Tensor> list;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && outputs[0].size() == static_cast<std::size_t>(size_),
                "holmes backend: gather: the root needs one list of ", size_, " output tensors");
    list = outputs[0];
    for (std::size_t i = 0; i < list.size(); ++i) {
      check_alike("gather", list[i], in, "output tensor", i);
      TORCH_CHECK(list[i].numel() == in.numel(), "holmes backend: gather: output tensor ", i,
                  " has ", list[i].numel(), " elements, the input ", in.numel());
    }
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "holmes backend: gather: only the root passes output tensors");
  }
  return launch(c10d::OpType::GATHER, "gather", list, [&](HolmesWork& w) {
    if (rank_ != root) {
      post_send(w, in, root, kBlockTag);
      return;
    }
    for (int peer = 0; peer < size_; ++peer) {
      const auto& target = list[static_cast<std::size_t>(peer)];
      if (peer == rank_) {
        target.copy_(in.view(target.sizes()));
      } else {
        post_recv(w, target, peer, kBlockTag);
      }
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const at::Tensor out = single("scatter", outputs);
  const int root = checked_root("scatter", opts.rootRank, size_);
  std::vector<at::Tensor> list;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<std::size_t>(size_),
                "holmes backend: scatter: the root needs one list of ", size_, " input tensors");
    list = inputs[0];
    for (std::size_t i = 0; i < list.size(); ++i) {
      check_alike("scatter", list[i], out, "input tensor", i);
      TORCH_CHECK(list[i].numel() == out.numel(), "holmes backend: scatter: input tensor ", i,
                  " has ", list[i].numel(), " elements, the output ", out.numel());
    }
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "holmes backend: scatter: only the root passes input tensors");
  }
  return launch(c10d::OpType::SCATTER, "scatter", {out}, [&](HolmesWork& w) {
    if (rank_ != root) {
      post_recv(w, out, root, kBlockTag);
      return;
    }
    for (int peer = 0; peer < size_; ++peer) {
      const auto& source = list[static_cast<std::size_t>(peer)];
      if (peer == rank_) {
        out.copy_(source.view(out.sizes()));
      } else {
        post_send(w, source, peer, kBlockTag);
      }
    }
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor out = single("reduce_scatter", outputs);
  TORCH_CHECK(inputs.size() == 1 && inputs[0].size() == static_cast<std::size_t>(size_),
              "holmes backend: reduce_scatter needs one list of ", size_, " input tensors");
  const std::vector<at::Tensor> list = inputs[0];
  for (std::size_t i = 0; i < list.size(); ++i) {
    check_alike("reduce_scatter", list[i], out, "input tensor", i);
    TORCH_CHECK(list[i].numel() == out.numel(), "holmes backend: reduce_scatter: input tensor ", i,
                " has ", list[i].numel(), " elements, the output ", out.numel());
  }
  const Reduction r = reduction_of("reduce_scatter", out, opts.reduceOp);
  return launch(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", {out}, [&](HolmesWork& w) {
    const int64_t n = out.numel();
    const int64_t me = rank_;
    if (r.kind == Reduction::Kind::kBitwise) {
      gather_and_fold(w, flatten(list), r.torch_op, [out, n, me](const at::Tensor& all) {
        out.copy_(all.narrow(0, me * n, n).view(out.sizes()));
      });
      return;
    }
    const at::Tensor dst = dense(out);
    const void* src = nullptr;
    if (adjacent(list)) {
      order_after_stream(list[0]);
      src = list[0].data_ptr();
      w.keep.insert(w.keep.end(), list.begin(), list.end());
    } else {
      const at::Tensor flat = flatten(list);
      src = flat.data_ptr();
      w.keep.push_back(flat);
    }
    w.requests.push_back(comm_.ireduce_scatter(src, dst.data_ptr(), r.count, r.dtype, r.op));
    copy_back(w, out, dst);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_device("reduce_scatter_tensor", input);
  check_alike("reduce_scatter_tensor", output, input, "output", 0);
  TORCH_CHECK(input.numel() == output.numel() * size_,
              "holmes backend: reduce_scatter_tensor: the input has ", input.numel(),
              " elements, the group's ", size_, " outputs of ", output.numel(), " need ",
              output.numel() * size_);
  const at::Tensor out = output;
  const at::Tensor in = input;
  const Reduction r = reduction_of("reduce_scatter_tensor", out, opts.reduceOp);
  return launch(
      c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor", {out}, [&](HolmesWork& w) {
        const at::Tensor src = dense(in);
        const int64_t n = out.numel();
        const int64_t me = rank_;
        if (r.kind == Reduction::Kind::kBitwise) {
          gather_and_fold(w, src, r.torch_op, [out, n, me](const at::Tensor& all) {
            out.copy_(all.narrow(0, me * n, n).view(out.sizes()));
          });
          return;
        }
        const at::Tensor dst = dense(out);
        w.requests.push_back(
            comm_.ireduce_scatter(src.data_ptr(), dst.data_ptr(), r.count, r.dtype, r.op));
        w.keep.push_back(src);
        copy_back(w, out, dst);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
    std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& /*opts*/) {
  check_device("all_to_all_single", input);
  check_alike("all_to_all_single", output, input, "output", 0);
  const at::Tensor out = output;
  const at::Tensor in = input;
  const bool even = output_splits.empty() && input_splits.empty();
  const auto in_rows = rows_per_rank("all_to_all_single", "input", in, input_splits, size_);
  const auto out_rows = rows_per_rank("all_to_all_single", "output", out, output_splits, size_);
  return launch(c10d::OpType::ALLTOALL_BASE, "all_to_all_single", {out}, [&](HolmesWork& w) {
    const at::Tensor src = dense(in);
    const at::Tensor dst = dense(out);
    if (even && src.numel() == dst.numel()) {
      const Carrier c = carrier_of(src);
      w.requests.push_back(comm_.ialltoall(src.data_ptr(), dst.data_ptr(),
                                           c.count / static_cast<std::size_t>(size_), c.dtype));
      w.keep.push_back(src);
    } else {
      exchange_blocks(w, blocks_of(src, in_rows), blocks_of(dst, out_rows));
    }
    copy_back(w, out, dst);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::alltoall(std::vector<at::Tensor>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllToAllOptions& /*opts*/) {
  TORCH_CHECK(outputs.size() == static_cast<std::size_t>(size_) &&
                  inputs.size() == static_cast<std::size_t>(size_),
              "holmes backend: all_to_all needs ", size_, " input and output tensors, got ",
              inputs.size(), " and ", outputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_alike("all_to_all", inputs[i], inputs[0], "input tensor", i);
    check_alike("all_to_all", outputs[i], inputs[0], "output tensor", i);
  }
  const std::vector<at::Tensor> ins = inputs;
  const std::vector<at::Tensor> outs = outputs;
  return launch(c10d::OpType::ALLTOALL, "all_to_all", outs,
                [&](HolmesWork& w) { exchange_blocks(w, ins, outs); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::send(std::vector<at::Tensor>& tensors, int dst,
                                                        int tag) {
  const at::Tensor t = single("send", tensors);
  TORCH_CHECK(tag >= 0 && tag <= kMaxUserTag, "holmes backend: send: tag ", tag, " is outside [0, ",
              kMaxUserTag, "]");
  return launch(c10d::OpType::SEND, "send", {t},
                [&](HolmesWork& w) { post_send(w, t, dst, static_cast<std::uint32_t>(tag)); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::recv(std::vector<at::Tensor>& tensors, int src,
                                                        int tag) {
  const at::Tensor t = single("recv", tensors);
  TORCH_CHECK(tag >= 0 && tag <= kMaxUserTag, "holmes backend: recv: tag ", tag, " is outside [0, ",
              kMaxUserTag, "]");
  return launch(c10d::OpType::RECV, "recv", {t}, [&](HolmesWork& w) {
    w.source_rank_ = src;
    post_recv(w, t, src, static_cast<std::uint32_t>(tag));
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                 int tag) {
  const at::Tensor t = single("recv from any source", tensors);
  TORCH_CHECK(tag >= 0 && tag <= kMaxUserTag, "holmes backend: recv from any source: tag ", tag,
              " is outside [0, ", kMaxUserTag, "]");
  return launch(c10d::OpType::RECVANYSOURCE, "recv from any source", {t}, [&](HolmesWork& w) {
    post_recv(w, t, HM_ANY_SOURCE, static_cast<std::uint32_t>(tag));
    // Holmes names the sender once the message is in; dist.recv returns it (Work::sourceRank).
    add_finish(
        w, [&w, index = w.requests.size() - 1] { w.source_rank_ = w.requests[index].source(); });
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupHolmes::barrier(const c10d::BarrierOptions& /*opts*/) {
  return launch(c10d::OpType::BARRIER, "barrier", {},
                [&](HolmesWork& w) { w.requests.push_back(comm_.ibarrier()); });
}

c10::intrusive_ptr<ProcessGroupHolmes> create_process_group_holmes(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::duration<float> timeout) {
  return c10::make_intrusive<ProcessGroupHolmes>(
      store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
}

}  // namespace holmes::torch_backend
