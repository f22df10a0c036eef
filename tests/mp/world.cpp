#include "world.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include "core/dtype.hpp"

namespace holmes::test {
namespace {

std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> comm;
  return comm;
}

}  // namespace

Communicator& world() { return *world_slot(); }

const char* count_case_name(CountCase c) {
  switch (c) {
    case CountCase::kZero:
      return "Zero";
    case CountCase::kOne:
      return "One";
    case CountCase::kSeven:
      return "Seven";
    case CountCase::kRanksMinusOne:
      return "RanksMinusOne";
    case CountCase::kPrime:
      return "Prime99991";
    case CountCase::kLarge:
      return "Large16MiB";
  }
  return "?";
}

std::size_t count_for(CountCase c, hm_dtype_t dtype, int ranks, std::size_t blocks) {
  switch (c) {
    case CountCase::kZero:
      return 0;
    case CountCase::kOne:
      return 1;
    case CountCase::kSeven:
      return 7;
    case CountCase::kRanksMinusOne:
      return static_cast<std::size_t>(ranks - 1);
    case CountCase::kPrime:
      return 99991;  // the largest prime below 1e5
    case CountCase::kLarge:
      return (16u << 20) / dtype_size(dtype) / blocks;
  }
  return 0;
}

const char* placement_name(Placement p) {
  switch (p) {
    case Placement::kOutOfPlace:
      return "OutOfPlace";
    case Placement::kInPlace:
      return "InPlace";
    case Placement::kSamePointer:
      return "SamePointer";
  }
  return "?";
}

bool full_matrix() {
  const char* value = std::getenv("HOLMES_TEST_MATRIX");
  return value != nullptr && std::string_view(value) == "full";
}

bool large_case_runs(std::size_t dtype_index, std::size_t op_index, std::size_t ops,
                     std::size_t placement_index, std::size_t placements) {
  if (full_matrix()) return true;
  return op_index == dtype_index % ops && placement_index == dtype_index % placements;
}

std::vector<ReductionParam> reduction_matrix(std::span<const Placement> placements) {
  std::vector<ReductionParam> params;
  for (std::size_t d = 0; d < std::size(kAllDtypes); ++d) {
    for (std::size_t o = 0; o < std::size(kAllOps); ++o) {
      for (const CountCase count : kAllCounts) {
        for (std::size_t p = 0; p < placements.size(); ++p) {
          if (count == CountCase::kLarge &&
              !large_case_runs(d, o, std::size(kAllOps), p, placements.size())) {
            continue;
          }
          params.emplace_back(kAllDtypes[d], kAllOps[o], count, placements[p]);
        }
      }
    }
  }
  return params;
}

std::vector<MoveParam> move_matrix(std::span<const Placement> placements) {
  std::vector<MoveParam> params;
  for (std::size_t d = 0; d < std::size(kAllDtypes); ++d) {
    for (const CountCase count : kAllCounts) {
      for (std::size_t p = 0; p < placements.size(); ++p) {
        if (count == CountCase::kLarge && !large_case_runs(d, 0, 1, p, placements.size())) continue;
        params.emplace_back(kAllDtypes[d], count, placements[p]);
      }
    }
  }
  return params;
}

unsigned salt_of(int a, int b, int c, int d) {
  return static_cast<unsigned>(a * 1000003 + b * 10007 + c * 101 + d) % 997;
}

std::vector<std::byte> garbage(std::size_t count, hm_dtype_t dtype) {
  // 0x7d bytes: as integers a large value no test sum reaches, as floats a large finite value.
  return std::vector<std::byte>(count * dtype_size(dtype), std::byte{0x7d});
}

std::uint64_t fingerprint(const void* data, std::size_t bytes) {
  std::uint64_t hash = 14695981039346656037ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    hash ^= p[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

std::vector<std::uint64_t> gather_all(std::uint64_t x) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(world().size()));
  world().allgather(&x, all.data(), 1, HM_UINT64);
  return all;
}

}  // namespace holmes::test

// Every rank initialises the world from the variables holmes-run set, runs the same tests, and
// leaves through a barrier so that no rank tears down while another still needs it.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (::testing::GTEST_FLAG(list_tests)) return RUN_ALL_TESTS();  // no ranks needed to list
  try {
    holmes::test::world_slot() =
        std::make_unique<holmes::Communicator>(holmes::Communicator::init_from_env());
  } catch (const holmes::Error& e) {
    std::fprintf(stderr, "cannot create the world communicator: %s\n", e.what());
    return 2;
  }
  const int result = RUN_ALL_TESTS();
  try {
    holmes::test::world().barrier();
  } catch (const holmes::Error& e) {
    std::fprintf(stderr, "final barrier failed: %s\n", e.what());
    // Destroy the world now, not among the static destructors: objects it still holds (a test
    // device's memory) may need statics that are gone by then.
    holmes::test::world_slot().reset();
    return 3;
  }
  holmes::test::world_slot().reset();
  return result;
}
