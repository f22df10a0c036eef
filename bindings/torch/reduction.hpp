// How torch's dtypes and reduction ops map onto Holmes's: which Holmes dtype carries a tensor,
// which Holmes op reduces it, and what Holmes cannot do (refused with a message naming the op,
// the dtype and the backend, never run wrongly).
#pragma once

#include <holmes/holmes.h>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstddef>

namespace holmes::torch_backend {

// A tensor's elements as Holmes moves them: its own dtype where Holmes has it, else bytes
// (broadcast, gathers, all-to-all and send/recv move any dtype).
struct Carrier {
  hm_dtype_t dtype;
  std::size_t count;  // elements of `dtype` in the tensor
};
Carrier carrier_of(const at::Tensor& tensor);

// A reduction of a tensor on Holmes.
struct Reduction {
  enum class Kind {
    kHolmes,   // Holmes reduces `count` elements of `dtype` with `op`
    kBitwise,  // BAND/BOR/BXOR (and bool BXOR): every rank's data gathered, reduced by torch
  };
  Kind kind = Kind::kHolmes;
  hm_dtype_t dtype = HM_FLOAT32;
  hm_op_t op = HM_SUM;
  std::size_t count = 0;
  c10d::ReduceOp::RedOpType torch_op = c10d::ReduceOp::SUM;
};

// Throws c10::Error ("holmes backend: <collective> ...") for an op or dtype Holmes cannot reduce.
Reduction reduction_of(const char* collective, const at::Tensor& tensor, const c10d::ReduceOp& op);

// Folds `gathered` (ranks x elements, rank-major) with a bitwise op into one row.
at::Tensor fold_bitwise(const at::Tensor& gathered, c10d::ReduceOp::RedOpType op);

const char* op_name(c10d::ReduceOp::RedOpType op);

}  // namespace holmes::torch_backend
