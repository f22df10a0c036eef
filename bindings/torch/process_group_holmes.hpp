// The torch.distributed backend "holmes": every c10d operation on Holmes's communicator, so a
// trainer written for gloo or NCCL gets Holmes's transports, island-aware algorithms and planner
// by changing the backend's name. A c10d::ProcessGroup for torch 1.x, a c10d::Backend for
// torch >= 2.0 (the same source; TORCH_VERSION_MAJOR chooses).
#pragma once

#include <holmes/holmes.hpp>

#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "work.hpp"

namespace holmes::torch_backend {

#if TORCH_VERSION_MAJOR >= 2
using BackendBase = c10d::Backend;
#else
using BackendBase = c10d::ProcessGroup;
#endif

// Tags below this are the caller's (send/recv); the ones above carry the gathers, scatters and
// all-to-alls with uneven splits that Holmes has no collective for.
constexpr int kMaxUserTag = (1 << 29) - 1;

class ProcessGroupHolmes final : public BackendBase {
 public:
  // Collective over the group's ranks: they meet through `store` (torch's, already prefixed for
  // this group). Settings other than rank, size, store and timeout come from the environment.
  ProcessGroupHolmes(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  // Over a communicator Holmes made (a shrink's survivors, holmes.torch.shrink_group).
  ProcessGroupHolmes(Communicator comm, std::chrono::milliseconds timeout);
  ~ProcessGroupHolmes() override;

  const std::string getBackendName() const override { return "holmes"; }
  Communicator& communicator() { return comm_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

 private:
  using Start = std::function<void(HolmesWork&)>;
  // Issues one operation: `start` posts its Holmes requests (under the issue lock, so every
  // rank's operations reach Holmes in the order torch made them) and may set the work's finish.
  c10::intrusive_ptr<c10d::Work> launch(c10d::OpType type, const char* name,
                                        std::vector<at::Tensor> outputs, const Start& start);
  // Every rank's `input` into `gathered` (ranks x elements), then a bitwise fold into `apply`.
  void gather_and_fold(HolmesWork& work, const at::Tensor& input, c10d::ReduceOp::RedOpType op,
                       std::function<void(const at::Tensor&)> apply);
  // Posts the sends and receives of an all-to-all whose blocks differ in size; own block copied.
  void exchange_blocks(HolmesWork& work, const std::vector<at::Tensor>& send_blocks,
                       const std::vector<at::Tensor>& recv_blocks);
  void post_send(HolmesWork& work, const at::Tensor& block, int peer, std::uint32_t tag);
  void post_recv(HolmesWork& work, const at::Tensor& block, int peer, std::uint32_t tag);

  Communicator comm_;
  std::chrono::milliseconds timeout_;
  std::mutex issue_mutex_;
  Completer completer_;
};

// The creator torch.distributed calls: (store, rank, size, timeout).
c10::intrusive_ptr<ProcessGroupHolmes> create_process_group_holmes(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::duration<float> timeout);

}  // namespace holmes::torch_backend
