// Inputs whose reductions are exact in every dtype, and their expected results, computed
// independently of the library (in double, then rounded once to the dtype). Used by holmes-bench
// --check and by the tests: with these values any reduction order gives bitwise the same
// answer, so results can be compared exactly.
#pragma once

#include <holmes/holmes.h>

#include <cstddef>

namespace holmes::check {

// Element `index` of rank `rank`'s input: small integers in [-4, 4] (unsigned: [0, 8]) for
// sum/min/max/avg, and in {1, 2, -1, -2} (unsigned: {1, 2}) for prod, so that sums of up to 32
// ranks and products of up to 14 ranks stay exact in float16 and bfloat16. `salt` varies the
// pattern between calls.
double input_value(hm_dtype_t dtype, hm_op_t op, int rank, std::size_t index, unsigned salt = 0);

// Writes elements [offset, offset + count) of rank `rank`'s input, encoded in dtype.
void fill_input(void* buffer, hm_dtype_t dtype, hm_op_t op, int rank, std::size_t offset,
                std::size_t count, unsigned salt = 0);

// Writes the reduction over ranks [0, nranks) of elements [offset, offset + count).
void fill_expected(void* buffer, hm_dtype_t dtype, hm_op_t op, int nranks, std::size_t offset,
                   std::size_t count, unsigned salt = 0);

// Elements whose bytes differ.
std::size_t count_wrong(const void* got, const void* expected, std::size_t count, hm_dtype_t dtype);

// Encodes a double (already representable or to be rounded to nearest even) as one element.
void encode(double value, hm_dtype_t dtype, void* element);

}  // namespace holmes::check
