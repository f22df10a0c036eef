/*
 * A plain C99 program using Holmes through its installed C API:
 *
 *   cc -std=c99 allreduce_check.c $(pkg-config --cflags --libs holmes) -o allreduce_check
 *   holmes-run -n 4 -- ./allreduce_check
 *
 * Every rank runs allreduce for every dtype and op on values whose results are exact, checks
 * each element against the expected value computed here, and exits non-zero on any mismatch.
 */
#include <holmes/holmes.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT 1000

#define CHECK(call)                                                            \
  do {                                                                         \
    hm_status_t status_ = (call);                                              \
    if (status_ != HM_SUCCESS) {                                               \
      fprintf(stderr, "%s failed: %s: %s\n", #call, hm_status_string(status_), \
              hm_last_error_message());                                        \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

static const char* const kDtypeNames[] = {"int8",   "uint8",   "int32",    "uint32",  "int64",
                                          "uint64", "float16", "bfloat16", "float32", "float64"};
static const char* const kOpNames[] = {"sum", "prod", "min", "max", "avg"};

/* Small integers (products: 1, 2, -1, -2): exact in every dtype for a few ranks. */
static double input_value(int rank, int i, hm_op_t op, int is_unsigned) {
  int k = (rank * 3 + i) % 5;
  if (op == HM_PROD) {
    static const double kSigned[5] = {1, 2, -1, 1, -2};
    static const double kUnsigned[5] = {1, 2, 1, 1, 2};
    return is_unsigned ? kUnsigned[k] : kSigned[k];
  }
  return is_unsigned ? (double)k : (double)(k - 2);
}

/* float -> IEEE half for values that are exact in half (small integers, quarters). */
static uint16_t half_from_double(double v) {
  uint16_t sign = 0;
  int exponent = 0;
  double mantissa;
  if (v == 0) return 0;
  if (v < 0) {
    sign = 0x8000;
    v = -v;
  }
  mantissa = frexp(v, &exponent); /* v = mantissa * 2^exponent, mantissa in [0.5, 1) */
  return (uint16_t)(sign | ((exponent + 14) << 10) | ((uint16_t)(mantissa * 2048) & 0x3ff));
}

static void encode(double v, hm_dtype_t dtype, unsigned char* out) {
  switch (dtype) {
    case HM_INT8: {
      int8_t x = (int8_t)v;
      memcpy(out, &x, 1);
      break;
    }
    case HM_UINT8: {
      uint8_t x = (uint8_t)v;
      memcpy(out, &x, 1);
      break;
    }
    case HM_INT32: {
      int32_t x = (int32_t)v;
      memcpy(out, &x, 4);
      break;
    }
    case HM_UINT32: {
      uint32_t x = (uint32_t)v;
      memcpy(out, &x, 4);
      break;
    }
    case HM_INT64: {
      int64_t x = (int64_t)v;
      memcpy(out, &x, 8);
      break;
    }
    case HM_UINT64: {
      uint64_t x = (uint64_t)v;
      memcpy(out, &x, 8);
      break;
    }
    case HM_FLOAT16: {
      uint16_t x = half_from_double(v);
      memcpy(out, &x, 2);
      break;
    }
    case HM_BFLOAT16: {
      float f = (float)v;
      uint32_t bits;
      uint16_t x;
      memcpy(&bits, &f, 4);
      x = (uint16_t)(bits >> 16); /* exact for these values */
      memcpy(out, &x, 2);
      break;
    }
    case HM_FLOAT32: {
      float x = (float)v;
      memcpy(out, &x, 4);
      break;
    }
    case HM_FLOAT64:
      memcpy(out, &v, 8);
      break;
    default:
      break;
  }
}

int main(void) {
  hm_comm_t comm;
  int rank, size, d, o, i, r, failures = 0;
  CHECK(hm_init_from_env(&comm));
  CHECK(hm_comm_rank(comm, &rank));
  CHECK(hm_comm_size(comm, &size));
  for (d = 0; d < HM_DTYPE_COUNT; ++d) {
    hm_dtype_t dtype = (hm_dtype_t)d;
    int is_unsigned = dtype == HM_UINT8 || dtype == HM_UINT32 || dtype == HM_UINT64;
    int is_float = dtype >= HM_FLOAT16;
    size_t es;
    unsigned char *send, *recv, *expected;
    CHECK(hm_dtype_size(dtype, &es));
    send = malloc(COUNT * es);
    recv = malloc(COUNT * es);
    expected = malloc(COUNT * es);
    for (o = 0; o < HM_OP_COUNT; ++o) {
      hm_op_t op = (hm_op_t)o;
      size_t wrong = 0;
      for (i = 0; i < COUNT; ++i) {
        double acc = input_value(0, i, op, is_unsigned);
        encode(input_value(rank, i, op, is_unsigned), dtype, send + i * es);
        for (r = 1; r < size; ++r) {
          double v = input_value(r, i, op, is_unsigned);
          if (op == HM_PROD)
            acc *= v;
          else if (op == HM_MIN)
            acc = v < acc ? v : acc;
          else if (op == HM_MAX)
            acc = v > acc ? v : acc;
          else
            acc += v;
        }
        if (op == HM_AVG) acc = is_float ? acc / size : trunc(acc / size);
        encode(acc, dtype, expected + i * es);
      }
      memset(recv, 0xEE, COUNT * es);
      CHECK(hm_allreduce(comm, send, recv, COUNT, dtype, op));
      for (i = 0; i < COUNT; ++i) wrong += memcmp(recv + i * es, expected + i * es, es) != 0;
      if (wrong != 0) {
        fprintf(stderr, "rank %d: allreduce %s %s: %zu wrong elements\n", rank, kDtypeNames[d],
                kOpNames[o], wrong);
        ++failures;
      } else if (rank == 0) {
        printf("allreduce %-8s %-4s on %d ranks: OK\n", kDtypeNames[d], kOpNames[o], size);
      }
    }
    free(send);
    free(recv);
    free(expected);
  }
  {
    /* And one nonblocking call. */
    int64_t mine = rank, total = -1;
    hm_request_t request;
    CHECK(hm_iallreduce(comm, &mine, &total, 1, HM_INT64, HM_SUM, &request));
    CHECK(hm_wait(&request));
    if (total != (int64_t)size * (size - 1) / 2 || request != NULL) {
      fprintf(stderr, "rank %d: iallreduce gave %lld\n", rank, (long long)total);
      ++failures;
    }
  }
  CHECK(hm_barrier(comm));
  CHECK(hm_comm_destroy(comm));
  return failures == 0 ? 0 : 1;
}
