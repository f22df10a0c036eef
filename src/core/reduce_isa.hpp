// Which instruction set the CPU reduction kernels run on. Every instruction set computes bitwise
// the same results as the portable kernels (which the CUDA kernels also reproduce), so the
// choice changes speed only.
//
// HOLMES_REDUCE_ISA selects it, from the environment once per process, or through a
// communicator's config (hm_config_set), which then holds for the whole process:
//   auto      (default) the fastest one this CPU supports: avx2 when it has AVX2 and F16C
//   portable  plain C++, compiled for the baseline target
//   avx2      AVX2 + F16C kernels; an error (HM_ERR_UNSUPPORTED) on a CPU without them
// Any other value is an error (HM_ERR_INVALID_ARGUMENT) naming the variable.
#pragma once

#include <optional>
#include <string_view>

namespace holmes {

enum class ReduceIsa { kPortable, kAvx2 };

// "portable" or "avx2".
const char* reduce_isa_name(ReduceIsa isa) noexcept;

// Whether this CPU (and its operating system, which must save the YMM registers) can run `isa`.
bool reduce_isa_supported(ReduceIsa isa) noexcept;

// The instruction set a HOLMES_REDUCE_ISA value (nullopt: unset) selects on a CPU that does or
// does not support AVX2 + F16C. Throws for an unknown value or an unsupported request.
ReduceIsa choose_reduce_isa(std::optional<std::string_view> setting, bool avx2_supported);

// The process's choice: HOLMES_REDUCE_ISA and the CPU, decided on the first call. Throws as
// choose_reduce_isa() does (on every call, while the variable stays bad).
ReduceIsa reduce_isa();

// Makes `isa` the process's choice from now on (a communicator configured with
// HOLMES_REDUCE_ISA); `isa` must be supported (choose_reduce_isa checks it).
void use_reduce_isa(ReduceIsa isa);

// reduce_isa_name(reduce_isa()), for logs and benchmarks.
const char* reduce_isa_name();

}  // namespace holmes
