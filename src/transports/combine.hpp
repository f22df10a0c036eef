// A receive that combines its message with data the receiver already holds, instead of handing
// the bytes over as they are: a reduce-scatter step wants `own input (+) received`, and a
// transport whose payload already sits in memory it can read (a shared-memory ring) computes
// that straight from there into the destination, saving a copy into scratch and its re-read.
#pragma once

#include <holmes/holmes.h>

#include <cstddef>

#include "core/dtype.hpp"

namespace holmes {

// The receive's buffer ends as reduce(dtype, op, buffer, in, message) (core/reduce.hpp): the
// receiver's own data first, the received second, exactly as a collective computes it itself,
// so that results stay bitwise the same whoever combines. `in` has the buffer's length and may
// be the buffer itself; HM_AVG combines as a sum (the collective divides at the end).
struct ReceiveCombine {
  const std::byte* in = nullptr;
  hm_dtype_t dtype = HM_FLOAT32;
  hm_op_t op = HM_SUM;
};

// Whether `combine` can apply to a receive of `bytes`: a known dtype and op, whole elements, and
// an input to combine with. Checked by the transport that offers combining receives (to refuse
// the call) and by the matcher (which holds the receive).
inline bool combine_fits(const ReceiveCombine& combine, std::size_t bytes) {
  const std::size_t es = dtype_size(combine.dtype);  // 0 for an unknown dtype
  return es != 0 && op_valid(combine.op) && bytes % es == 0 &&
         (combine.in != nullptr || bytes == 0);
}

}  // namespace holmes
