#include "core/reduce_isa.hpp"

#include <atomic>
#include <string>

#include "core/log.hpp"
#include "core/reduce_avx2.hpp"
#include "core/settings.hpp"
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

namespace {

// The process's choice: decided from the environment on first use, or set through a
// communicator's config (use_reduce_isa). Process-wide runtime state.
std::atomic<int>& chosen_isa() {
  static std::atomic<int> chosen{-1};
  return chosen;
}

}  // namespace

ReduceIsa reduce_isa() {
  auto& chosen = chosen_isa();
  const int known = chosen.load(std::memory_order_acquire);
  if (known >= 0) return static_cast<ReduceIsa>(known);
  // A throwing call leaves it undecided.
  const auto& setting = process_settings().value(Setting::kReduceIsa).text;
  const ReduceIsa isa =
      choose_reduce_isa(setting ? std::optional<std::string_view>(*setting) : std::nullopt,
                        reduce_isa_supported(ReduceIsa::kAvx2));
  int expected = -1;
  if (chosen.compare_exchange_strong(expected, static_cast<int>(isa), std::memory_order_acq_rel)) {
    HM_LOG_DEBUG("reduction kernels: {}", reduce_isa_name(isa));
    return isa;
  }
  return static_cast<ReduceIsa>(expected);
}

void use_reduce_isa(ReduceIsa isa) {
  if (chosen_isa().exchange(static_cast<int>(isa), std::memory_order_acq_rel) !=
      static_cast<int>(isa)) {
    HM_LOG_DEBUG("reduction kernels: {} (set through the config)", reduce_isa_name(isa));
  }
}

const char* reduce_isa_name() { return reduce_isa_name(reduce_isa()); }

}  // namespace holmes
