// core/cuda/stream_order.hpp: the point a stream-ordered call waits for and the gate its stream
// waits at. Without a device both refuse with HM_ERR_UNSUPPORTED naming why; on a GPU, a stream
// held at the gate runs nothing enqueued after it until the gate opens (cyclic tickets), and a
// point is reached only once the work before it has finished.
#include "core/cuda/stream_order.hpp"

#include <gtest/gtest.h>
#include <holmes/error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "cuda_test_support.hpp"

#if defined(HOLMES_HAVE_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace holmes {
namespace {

using namespace std::chrono_literals;

TEST(StreamOrder, WithoutADeviceBothRefuseAndSayWhy) {
  if (cuda_device_available()) GTEST_SKIP() << "this machine has a device";
  try {
    CudaStreamPoint point(nullptr);
    ADD_FAILURE() << "expected HM_ERR_UNSUPPORTED";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("no usable CUDA device"), std::string::npos) << e.what();
  }
  try {
    CudaStreamGate gate;
    ADD_FAILURE() << "expected HM_ERR_UNSUPPORTED";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), HM_ERR_UNSUPPORTED);
  }
}

#if defined(HOLMES_HAVE_CUDA)

// A host function that blocks its stream until `open` is set (at most 10 s).
void CUDART_CB block_until(void* open) {
  auto* flag = static_cast<std::atomic<bool>*>(open);
  for (int i = 0; i < 10000 && !flag->load(); ++i) std::this_thread::sleep_for(1ms);
}

void CUDART_CB set_flag(void* flag) { static_cast<std::atomic<bool>*>(flag)->store(true); }

// A non-blocking stream of the test's own, destroyed however the test ends.
struct TestStream {
  TestStream() { EXPECT_EQ(cudaStreamCreateWithFlags(&get, cudaStreamNonBlocking), cudaSuccess); }
  ~TestStream() {
    if (get != nullptr) cudaStreamDestroy(get);
  }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  cudaStream_t get = nullptr;
};

TEST(StreamOrder, PointIsReachedOnceTheWorkBeforeItHasRun) {
  HOLMES_REQUIRE_CUDA_DEVICE();
  TestStream owned;
  cudaStream_t stream = owned.get;
  std::atomic<bool> open{false};
  ASSERT_EQ(cudaLaunchHostFunc(stream, block_until, &open), cudaSuccess);
  CudaStreamPoint point(stream);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(point.reached());
  open = true;
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_TRUE(point.reached());
}

TEST(StreamOrder, GateHoldsTheStreamUntilItsTicketOpens) {
  HOLMES_REQUIRE_CUDA_DEVICE();
  TestStream owned;
  cudaStream_t stream = owned.get;
  CudaStreamGate gate;
  std::atomic<bool> first{false};
  std::atomic<bool> second{false};
  gate.hold(stream, 1);
  ASSERT_EQ(cudaLaunchHostFunc(stream, set_flag, &first), cudaSuccess);
  gate.hold(stream, 2);
  ASSERT_EQ(cudaLaunchHostFunc(stream, set_flag, &second), cudaSuccess);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(first.load());
  gate.open(1);
  for (int i = 0; i < 5000 && !first.load(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(first.load());
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(second.load()) << "ticket 2 is not open yet";
  gate.open(2);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_TRUE(second.load());
}

TEST(StreamOrder, TicketsCompareCyclically) {
  HOLMES_REQUIRE_CUDA_DEVICE();
  TestStream owned;
  cudaStream_t stream = owned.get;
  CudaStreamGate gate;
  gate.open(0xFFFFFFF0u);
  std::atomic<bool> ran{false};
  gate.hold(stream, 3);  // 3 comes 19 tickets after 0xFFFFFFF0: held
  ASSERT_EQ(cudaLaunchHostFunc(stream, set_flag, &ran), cudaSuccess);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(ran.load());
  gate.open(5);  // wrapped past 3
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_TRUE(ran.load());
}

#endif

}  // namespace
}  // namespace holmes
