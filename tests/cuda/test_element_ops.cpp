// The CUDA kernels' arithmetic (src/core/cuda/element_ops.hpp) run on the CPU against the CPU
// kernels of src/core/reduce.cpp: every dtype x op on inputs full of NaNs, infinities, signed
// zeros and subnormals, through the same range-splitting code the kernels use (16-byte packs
// plus unaligned heads and tails), with several simulated threads. Needs no GPU, so CI checks
// the bitwise agreement that ranks on different devices depend on; the GPU tests
// (test_device_reduce.cpp) then check that the device computes what this code says.
#include "core/cuda/element_ops.hpp"

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/reduce.hpp"
#include "cuda_test_support.hpp"

namespace holmes {
namespace {

using namespace device_ops;  // NOLINT: the names under test
using testing::Bytes;

// with_element_op (the kernels' own choice of type and operation), failing the test on a dtype
// or op it does not know.
template <typename F>
void with_op(hm_dtype_t dtype, hm_op_t op, F&& f) {
  const bool known = with_element_op(dtype, op, false, [&](auto tag, auto element_op) {
    f(tag, element_op);
    return true;
  });
  if (!known) FAIL() << "bad dtype or op";
}

template <typename F>
void with_divide(hm_dtype_t dtype, int nranks, F&& f) {
  const bool known = with_divide_op(dtype, nranks, false, [&](auto tag, auto element_op) {
    f(tag, element_op);
    return true;
  });
  if (!known) FAIL() << "bad dtype";
}

// The kernel's work split run on the CPU: `threads` simulated threads, one after another (each
// element belongs to exactly one thread, so the order does not matter).
void host_reduce_like_kernel(hm_dtype_t dtype, hm_op_t op, void* dst, const void* a, const void* b,
                             std::size_t count, std::size_t threads) {
  with_op(dtype, op, [&](auto tag, auto element_op) {
    using T = decltype(tag);
    const Split split = split_range<T>(count, {dst, a, b});
    for (std::size_t t = 0; t < threads; ++t) {
      binary_range(static_cast<T*>(dst), static_cast<const T*>(a), static_cast<const T*>(b), split,
                   element_op, t, threads);
    }
  });
}

// The n-way kernel's passes and work split run on the CPU, as launch_reduce_many runs them.
void host_reduce_many_like_kernel(hm_dtype_t dtype, hm_op_t op, void* dst,
                                  const std::vector<const void*>& inputs, std::size_t count,
                                  std::size_t threads) {
  with_op(dtype, op, [&](auto tag, auto element_op) {
    using T = decltype(tag);
    reduce_passes(dst, inputs.data(), inputs.size(), [&](const void* const* pass, int n) {
      ReduceInputs<T> in{};
      std::vector<const void*> pointers{dst};
      for (int j = 0; j < n; ++j) {
        in.at[j] = static_cast<const T*>(pass[j]);
        pointers.push_back(pass[j]);
      }
      in.count = n;
      const Split split = split_range<T>(count, pointers.data(), pointers.size());
      for (std::size_t t = 0; t < threads; ++t) {
        many_range(static_cast<T*>(dst), in, split, element_op, t, threads);
      }
    });
  });
}

void host_divide_like_kernel(hm_dtype_t dtype, void* data, std::size_t count, int nranks,
                             std::size_t threads) {
  with_divide(dtype, nranks, [&](auto tag, auto element_op) {
    using T = decltype(tag);
    const Split split = split_range<T>(count, {data});
    for (std::size_t t = 0; t < threads; ++t) {
      unary_range(static_cast<T*>(data), split, element_op, t, threads);
    }
  });
}

// Copies `bytes` into a buffer at `offset` bytes past a 16-byte boundary.
struct Placed {
  Placed(const Bytes& bytes, std::size_t offset) : storage(bytes.size() + 32, 0), at(offset) {
    const std::size_t shift =
        (16 - reinterpret_cast<std::uintptr_t>(storage.data()) % 16) % 16 + offset;
    at = shift;
    if (!bytes.empty()) std::memcpy(storage.data() + at, bytes.data(), bytes.size());
  }
  std::uint8_t* data() { return storage.data() + at; }
  Bytes bytes(std::size_t n) const { return Bytes(storage.begin() + at, storage.begin() + at + n); }
  Bytes storage;
  std::size_t at;
};

TEST(ElementOps, EveryDtypeAndOpMatchesTheCpuKernelBitwise) {
  std::mt19937_64 rng(2024);
  const std::size_t counts[] = {0, 1, 7, 15, 16, 17, 255, 4097};
  for (hm_dtype_t dtype : testing::kAllDtypes) {
    const std::size_t size = dtype_size(dtype);
    for (hm_op_t op : testing::kAllOps) {
      for (std::size_t count : counts) {
        const Bytes a = testing::random_inputs(dtype, count, rng);
        const Bytes b = testing::random_inputs(dtype, count, rng);
        Bytes expected(count * size);
        reduce(dtype, op, expected.data(), a.data(), b.data(), count);
        // Same and different misalignments of the three pointers, several thread counts.
        const std::size_t offsets[][3] = {
            {0, 0, 0}, {size, size, size}, {0, size, 2 * size}, {8, 8, 8}};
        for (const auto& offset : offsets) {
          for (std::size_t threads : {1, 3, 64}) {
            Placed pa(a, offset[1]);
            Placed pb(b, offset[2]);
            Placed pd(Bytes(count * size, 0xa5), offset[0]);
            host_reduce_like_kernel(dtype, op, pd.data(), pa.data(), pb.data(), count, threads);
            const std::string diff =
                testing::first_differences(dtype, expected, pd.bytes(count * size));
            ASSERT_EQ(diff, "") << testing::describe(dtype, op, count) << " offsets " << offset[0]
                                << "/" << offset[1] << "/" << offset[2] << " threads " << threads;
            EXPECT_EQ(pd.storage[pd.at + count * size], 0) << "wrote past the end";
          }
        }
        // In place: dst is a, and dst is b.
        Bytes in_a = a;
        host_reduce_like_kernel(dtype, op, in_a.data(), in_a.data(), b.data(), count, 5);
        ASSERT_EQ(testing::first_differences(dtype, expected, in_a), "")
            << testing::describe(dtype, op, count) << " dst == a";
        Bytes in_b = b;
        host_reduce_like_kernel(dtype, op, in_b.data(), a.data(), in_b.data(), count, 5);
        ASSERT_EQ(testing::first_differences(dtype, expected, in_b), "")
            << testing::describe(dtype, op, count) << " dst == b";
      }
    }
  }
}

// Every pair of special values (NaN payloads, infinities, zeros, subnormals) in both orders.
TEST(ElementOps, NWayReductionEqualsPairwiseCpuKernelsBitwise) {
  // dst = in0 op in1 op ... in order, as the ipc engine reduces every rank's window: the same
  // bits as the CPU kernel applied pairwise, left to right, for 1 to 2 passes of inputs.
  std::mt19937_64 rng(7);
  const std::size_t counts[] = {0, 1, 17, 4097};
  for (hm_dtype_t dtype : testing::kAllDtypes) {
    const std::size_t size = dtype_size(dtype);
    for (hm_op_t op : testing::kAllOps) {
      for (std::size_t count : counts) {
        for (std::size_t n : {1, 2, 3, 8, 9, 16}) {
          std::vector<Bytes> raw;
          for (std::size_t j = 0; j < n; ++j) {
            raw.push_back(testing::random_inputs(dtype, count, rng));
          }
          Bytes expected = raw[0];
          for (std::size_t j = 1; j < n; ++j) {
            reduce(dtype, op, expected.data(), expected.data(), raw[j].data(), count);
          }
          // Inputs at the same offset past 16 bytes (packs), and at different ones (elements).
          for (const bool mixed : {false, true}) {
            std::vector<Placed> placed;
            std::vector<const void*> inputs;
            placed.reserve(n);
            for (std::size_t j = 0; j < n; ++j) {
              placed.emplace_back(raw[j], mixed ? (j % 2) * size : 0);
              inputs.push_back(placed.back().data());
            }
            Placed dst(Bytes(count * size, 0), 0);
            host_reduce_many_like_kernel(dtype, op, dst.data(), inputs, count, 3);
            EXPECT_EQ(dst.bytes(count * size), expected)
                << dtype_name(dtype) << " op " << op << " count " << count << " inputs " << n
                << (mixed ? " misaligned" : "");
          }
        }
      }
    }
  }
}

TEST(ElementOps, EveryPairOfSpecialValuesMatchesTheCpuKernel) {
  auto pairs = [](const auto& specials) {
    std::pair<Bytes, Bytes> out;
    using V = typename std::decay_t<decltype(specials)>::value_type;
    for (V x : specials) {
      for (V y : specials) {
        out.first.insert(out.first.end(), reinterpret_cast<const std::uint8_t*>(&x),
                         reinterpret_cast<const std::uint8_t*>(&x) + sizeof x);
        out.second.insert(out.second.end(), reinterpret_cast<const std::uint8_t*>(&y),
                          reinterpret_cast<const std::uint8_t*>(&y) + sizeof y);
      }
    }
    return out;
  };
  const std::pair<hm_dtype_t, std::pair<Bytes, Bytes>> cases[] = {
      {HM_FLOAT16, pairs(testing::special_halves())},
      {HM_BFLOAT16, pairs(testing::special_bfloat16s())},
      {HM_FLOAT32, pairs(testing::special_floats())},
      {HM_FLOAT64, pairs(testing::special_doubles())}};
  for (const auto& [dtype, inputs] : cases) {
    const auto& [a, b] = inputs;
    const std::size_t count = a.size() / dtype_size(dtype);
    for (hm_op_t op : testing::kAllOps) {
      Bytes expected(a.size());
      reduce(dtype, op, expected.data(), a.data(), b.data(), count);
      Bytes actual(a.size());
      host_reduce_like_kernel(dtype, op, actual.data(), a.data(), b.data(), count, 4);
      EXPECT_EQ(testing::first_differences(dtype, expected, actual), "")
          << testing::describe(dtype, op, count);
    }
  }
}

TEST(ElementOps, AverageMatchesFinalizeAverageBitwise) {
  std::mt19937_64 rng(99);
  for (hm_dtype_t dtype : testing::kAllDtypes) {
    for (int nranks : {1, 2, 3, 7, 8, 200, 1000003, INT_MAX}) {
      for (std::size_t count : {0, 1, 17, 4097}) {
        const Bytes input = testing::random_inputs(dtype, count, rng);
        Bytes expected = input;
        finalize_average(dtype, expected.data(), count, nranks);
        for (std::size_t offset : {std::size_t{0}, dtype_size(dtype)}) {
          Placed actual(input, offset);
          host_divide_like_kernel(dtype, actual.data(), count, nranks, 3);
          ASSERT_EQ(testing::first_differences(dtype, expected, actual.bytes(input.size())), "")
              << dtype_name(dtype) << " / " << nranks << " count " << count << " offset " << offset;
        }
      }
    }
  }
}

// The conversions repeat dtype.hpp's: every half and bfloat16 widens to the same float, and a
// spread of floats over every exponent (plus the specials) narrows to the same bits.
TEST(ElementOps, HalfConversionsMatchDtypeHpp) {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    ASSERT_EQ(bits_of(device_ops::half_to_float(bits)), bits_of(holmes::half_to_float(bits)))
        << std::hex << h;
    ASSERT_EQ(bits_of(device_ops::bfloat16_to_float(bits)),
              bits_of(holmes::bfloat16_to_float(bits)))
        << std::hex << h;
  }
  auto check = [](std::uint32_t bits) {
    const float f = float_from_bits(bits);
    ASSERT_EQ(device_ops::float_to_half(f), holmes::float_to_half(f)) << std::hex << bits;
    ASSERT_EQ(device_ops::float_to_bfloat16(f), holmes::float_to_bfloat16(f)) << std::hex << bits;
  };
  for (std::uint64_t bits = 0; bits <= 0xffffffffull; bits += 4099) {
    check(static_cast<std::uint32_t>(bits));
  }
  for (std::uint32_t bits : testing::special_floats()) check(bits);
  // Around every rounding boundary of the half range: exponents -25..16, low bits near the tie.
  for (std::uint32_t exponent = 102; exponent <= 143; ++exponent) {
    for (std::uint32_t low = 0; low < 0x4000; low += 0x3ff) {
      for (std::uint32_t sign : {0u, 0x80000000u}) {
        check(sign | (exponent << 23) | low);
        check(sign | (exponent << 23) | (0x7fffffu - low));
        check(sign | (exponent << 23) | (0x1000u + low));
      }
    }
  }
}

// The split covers every element exactly once, 16 bytes at a time where the pointers allow.
TEST(ElementOps, SplitCoversTheRangeWithAlignedPacks) {
  alignas(16) static std::uint8_t buffer[64];
  for (std::size_t count : {0, 1, 3, 4, 5, 8, 13}) {
    for (std::size_t misalign : {0, 4, 8, 12}) {
      const void* p = buffer + misalign;
      const Split split = split_range<float>(count, {p, p, p});
      const std::size_t expected_head = std::min<std::size_t>(count, (16 - misalign) % 16 / 4);
      EXPECT_EQ(split.head, expected_head) << count << " at +" << misalign;
      EXPECT_EQ(split.vectors, (count - split.head) / 4) << count << " at +" << misalign;
      EXPECT_EQ(split.count, count);
    }
  }
  // Different misalignments: no packs at all.
  const Split mixed = split_range<float>(100, {buffer, buffer + 4, buffer});
  EXPECT_EQ(mixed.head, 100u);
  EXPECT_EQ(mixed.vectors, 0u);
}

}  // namespace
}  // namespace holmes
