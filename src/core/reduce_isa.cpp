#include "core/reduce_isa.hpp"

#include <string>

#include "core/env.hpp"
#include "core/log.hpp"
#include "core/reduce_avx2.hpp"
#include "core/status.hpp"

#if HOLMES_HAVE_AVX2_KERNELS
#include <cpuid.h>
#endif

namespace holmes {

#if HOLMES_HAVE_AVX2_KERNELS
namespace {

// F16C from CPUID leaf 1 (ECX bit 29): Clang 14's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() noexcept {
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

}  // namespace
#endif

const char* reduce_isa_name(ReduceIsa isa) noexcept {
  switch (isa) {
    case ReduceIsa::kPortable:
      return "portable";
    case ReduceIsa::kAvx2:
      return "avx2";
  }
  return "invalid-isa";
}

bool reduce_isa_supported(ReduceIsa isa) noexcept {
  switch (isa) {
    case ReduceIsa::kPortable:
      return true;
    case ReduceIsa::kAvx2:
#if HOLMES_HAVE_AVX2_KERNELS
      // GCC and Clang report AVX features only when the OS enables the YMM state (XGETBV).
      __builtin_cpu_init();
      return __builtin_cpu_supports("avx2") && cpu_has_f16c();
#else
      return false;
#endif
  }
  return false;
}

ReduceIsa choose_reduce_isa(std::optional<std::string_view> setting, bool avx2_supported) {
  if (!setting || *setting == "auto") {
    return avx2_supported ? ReduceIsa::kAvx2 : ReduceIsa::kPortable;
  }
  if (*setting == "portable") return ReduceIsa::kPortable;
  if (*setting == "avx2") {
    if (!avx2_supported) {
      fail(HM_ERR_UNSUPPORTED, "HOLMES_REDUCE_ISA=avx2, but this CPU lacks AVX2 or F16C");
    }
    return ReduceIsa::kAvx2;
  }
  fail(HM_ERR_INVALID_ARGUMENT, "HOLMES_REDUCE_ISA: '{}' is not auto, portable or avx2",
       std::string(*setting));
}

ReduceIsa reduce_isa() {
  // Process-wide and immutable once decided; a throwing first call leaves it undecided.
  static const ReduceIsa chosen = [] {
    const std::optional<std::string> setting = env_string("HOLMES_REDUCE_ISA");
    const ReduceIsa isa =
        choose_reduce_isa(setting ? std::optional<std::string_view>(*setting) : std::nullopt,
                          reduce_isa_supported(ReduceIsa::kAvx2));
    HM_LOG_DEBUG("reduction kernels: {}", reduce_isa_name(isa));
    return isa;
  }();
  return chosen;
}

const char* reduce_isa_name() { return reduce_isa_name(reduce_isa()); }

}  // namespace holmes
