// A trainer step on the GPU, communication blocking against stream-ordered (bench/gpu-check.sh):
// `layers` layers, each a compute kernel that writes its gradient, then an allreduce of it.
// Blocking: each allreduce waits for its layer's kernel and the next kernel waits for the
// allreduce. Stream-ordered (hm_comm_set_cuda_stream): the allreduces go on a communication
// stream that waits for each layer's kernel by an event, so layer l's allreduce runs while layer
// l+1 computes, as with NCCL. Both are checked exactly; the step times and their ratio printed.
//
// Usage: holmes-run -n N -- holmes-cuda-stream-step [MiB per gradient = 16] [layers = 8]
//        [steps = 5] [rounds = 20000: the compute kernel's passes per element, its length]
#include <cuda_runtime_api.h>
#include <holmes/holmes.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

#define CHECK_CUDA(call)                                                 \
  do {                                                                   \
    const cudaError_t check_error_ = (call);                             \
    if (check_error_ != cudaSuccess) {                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(check_error_));                    \
      std::exit(2);                                                      \
    }                                                                    \
  } while (0)
#define CHECK_HM(call)                                                                             \
  do {                                                                                             \
    const hm_status_t s = (call);                                                                  \
    if (s != HM_SUCCESS) {                                                                         \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, hm_last_error_message()); \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

// The layer's "compute": `rounds` passes over the gradient, ending with grad[i] = value (exact).
__global__ void compute(float* grad, size_t n, float value, int rounds) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float x = 0.f;
    for (int r = 0; r < rounds; ++r) x = x * 0.5f + value * 0.5f;
    grad[i] = x == value ? value : x + value;  // x reaches value exactly within 64 rounds
  }
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 16;
  const int layers = argc > 2 ? std::atoi(argv[2]) : 8;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 5;
  const size_t n = mib * (size_t{1} << 20) / sizeof(float);
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 20000;
  hm_comm_t comm = nullptr;
  CHECK_HM(hm_init_from_env(&comm));
  int rank = 0, size = 1;
  hm_comm_rank(comm, &rank);
  hm_comm_size(comm, &size);
  int devices = 0;
  CHECK_CUDA(cudaGetDeviceCount(&devices));
  CHECK_CUDA(cudaSetDevice(rank % devices));
  std::vector<float*> grads(static_cast<size_t>(layers));
  for (auto& g : grads) CHECK_CUDA(cudaMalloc(&g, n * sizeof(float)));
  cudaStream_t compute_stream = nullptr, comm_stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&compute_stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&comm_stream, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> computed(static_cast<size_t>(layers));
  for (auto& e : computed) CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const float value = static_cast<float>(rank + 1);
  const float expected = static_cast<float>(size * (size + 1) / 2);

  auto step = [&](bool ordered) {
    CHECK_HM(hm_barrier(comm));
    const auto start = std::chrono::steady_clock::now();
    if (ordered) CHECK_HM(hm_comm_set_cuda_stream(comm, comm_stream));
    for (int l = 0; l < layers; ++l) {
      float* g = grads[static_cast<size_t>(l)];
      compute<<<264, 256, 0, compute_stream>>>(g, n, value, rounds);
      CHECK_CUDA(cudaGetLastError());
      if (ordered) {
        CHECK_CUDA(cudaEventRecord(computed[static_cast<size_t>(l)], compute_stream));
        CHECK_CUDA(cudaStreamWaitEvent(comm_stream, computed[static_cast<size_t>(l)], 0));
      } else {
        CHECK_CUDA(cudaStreamSynchronize(compute_stream));
      }
      CHECK_HM(hm_allreduce(comm, g, g, n, HM_FLOAT32, HM_SUM));
    }
    if (ordered) {
      CHECK_CUDA(cudaStreamSynchronize(comm_stream));
      CHECK_HM(hm_comm_clear_cuda_stream(comm));
      hm_status_t async = HM_SUCCESS;
      CHECK_HM(hm_comm_get_async_error(comm, &async));
      if (async != HM_SUCCESS) {
        std::fprintf(stderr, "rank %d: async error %s\n", rank, hm_status_string(async));
        std::exit(1);
      }
    }
    CHECK_CUDA(cudaStreamSynchronize(compute_stream));
    const double took = seconds_since(start);
    // Every gradient holds the sum over ranks of their values.
    std::vector<float> host(n);
    for (int l = 0; l < layers; ++l) {
      CHECK_CUDA(cudaMemcpy(host.data(), grads[static_cast<size_t>(l)], n * sizeof(float),
                            cudaMemcpyDeviceToHost));
      const auto wrong =
          std::count_if(host.begin(), host.end(), [&](float x) { return x != expected; });
      if (wrong != 0) {
        std::fprintf(stderr, "rank %d: layer %d: %zd of %zu elements wrong (%s)\n", rank, l,
                     static_cast<std::ptrdiff_t>(wrong), n,
                     ordered ? "stream-ordered" : "blocking");
        std::exit(1);
      }
    }
    return took;
  };

  step(false);  // warm-up: staging slots, scratch, connections
  step(true);
  std::vector<double> blocking, ordered;
  for (int s = 0; s < steps; ++s) {
    blocking.push_back(step(false));
    ordered.push_back(step(true));
  }
  std::sort(blocking.begin(), blocking.end());
  std::sort(ordered.begin(), ordered.end());
  const double b = blocking[blocking.size() / 2];
  const double o = ordered[ordered.size() / 2];
  if (rank == 0) {
    std::printf(
        "trainer step, %d ranks, %d layers x %zu MiB gradients (median of %d): blocking "
        "%.1f ms, stream-ordered %.1f ms, ratio %.2f\n",
        size, layers, mib, steps, b * 1e3, o * 1e3, o / b);
  }
  for (auto e : computed) cudaEventDestroy(e);
  for (auto g : grads) cudaFree(g);
  hm_comm_destroy(comm);
  return 0;
}
