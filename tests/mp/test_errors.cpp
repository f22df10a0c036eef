// Errors through the C API, with real ranks: bad arguments are refused with
// HM_ERR_INVALID_ARGUMENT and a message before anything is sent; ranks that disagree get
// HM_ERR_MISMATCH; a silent peer gives HM_ERR_TIMEOUT naming it; hm_comm_abort wakes a blocked
// thread. Faults are provoked in separate communicators so the world stays healthy.
#include <holmes/holmes.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "world.hpp"

namespace holmes::test {
namespace {

// A C handle on a split of the world (collective), released at the end of the scope.
struct CComm {
  hm_comm_t handle = nullptr;
  CComm() {
    // Reach the C API through a fresh world built from the same environment: hm_init_from_env
    // meets the other ranks' n-th init through the store.
    EXPECT_EQ(hm_init_from_env(&handle), HM_SUCCESS) << hm_last_error_message();
  }
  explicit CComm(int timeout_ms) {
    hm_config_t config = HM_CONFIG_INITIALIZER;
    config.timeout_ms = timeout_ms;
    EXPECT_EQ(hm_init(&config, &handle), HM_SUCCESS) << hm_last_error_message();
  }
  ~CComm() {
    if (handle != nullptr) hm_comm_destroy(handle);
  }
};

bool mentions(const char* message, const char* word) {
  return std::string(message).find(word) != std::string::npos;
}

TEST(InvalidArgumentTest, RefusedWithAMessageAndNothingSent) {
  CComm comm;
  hm_comm_t c = comm.handle;
  int rank = -1;
  int size = 0;
  ASSERT_EQ(hm_comm_rank(c, &rank), HM_SUCCESS);
  ASSERT_EQ(hm_comm_size(c, &size), HM_SUCCESS);
  float x[4] = {1, 2, 3, 4};
  float y[4] = {0};

  EXPECT_EQ(hm_allreduce(c, nullptr, y, 4, HM_FLOAT32, HM_SUM), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "sendbuf is NULL")) << hm_last_error_message();
  EXPECT_EQ(hm_allreduce(c, x, nullptr, 4, HM_FLOAT32, HM_SUM), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "recvbuf is NULL"));
  EXPECT_EQ(hm_allreduce(c, x, y, 4, static_cast<hm_dtype_t>(42), HM_SUM), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "unknown dtype 42"));
  EXPECT_EQ(hm_allreduce(c, x, y, 4, HM_FLOAT32, static_cast<hm_op_t>(-3)),
            HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "unknown reduction op -3"));
  EXPECT_EQ(hm_allreduce(c, x, y, SIZE_MAX, HM_FLOAT32, HM_SUM), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "overflows"));
  EXPECT_EQ(hm_allgather(c, x, y, SIZE_MAX / 8, HM_UINT8), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_broadcast(c, x, 4, HM_FLOAT32, size), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "root"));
  EXPECT_EQ(hm_broadcast(c, nullptr, 4, HM_FLOAT32, 0), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_reduce(c, x, y, 4, HM_FLOAT32, HM_SUM, -1), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_reduce(c, x, nullptr, 4, HM_FLOAT32, HM_SUM, rank), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_send(c, x, 4, HM_FLOAT32, size), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "peer"));
  EXPECT_EQ(hm_recv(c, y, 4, HM_FLOAT32, -1), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_send(c, nullptr, 4, HM_FLOAT32, (rank + 1) % size), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_alltoall(c, x, nullptr, 1, HM_FLOAT32), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_reduce_scatter(c, x, y, 1, HM_FLOAT32, HM_OP_COUNT), HM_ERR_INVALID_ARGUMENT);
  // Null handles and out-pointers.
  EXPECT_EQ(hm_allreduce(nullptr, x, y, 4, HM_FLOAT32, HM_SUM), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "comm is NULL"));
  EXPECT_EQ(hm_comm_rank(c, nullptr), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_iallreduce(c, x, y, 4, HM_FLOAT32, HM_SUM, nullptr), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_wait(nullptr), HM_ERR_INVALID_ARGUMENT);
  hm_request_t none = nullptr;
  EXPECT_EQ(hm_wait(&none), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_wait_on_stream(nullptr), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_wait_on_stream(&none), HM_ERR_INVALID_ARGUMENT);
  // No stream set: refused, and the request is still the caller's to wait for.
  hm_request_t barrier = nullptr;
  ASSERT_EQ(hm_ibarrier(c, &barrier), HM_SUCCESS);
  EXPECT_EQ(hm_wait_on_stream(&barrier), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "no CUDA stream")) << hm_last_error_message();
  ASSERT_NE(barrier, nullptr);
  EXPECT_EQ(hm_wait(&barrier), HM_SUCCESS);
  EXPECT_EQ(hm_comm_destroy(nullptr), HM_ERR_INVALID_ARGUMENT);
  size_t bytes = 0;
  EXPECT_EQ(hm_dtype_size(HM_DTYPE_COUNT, &bytes), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hm_dtype_size(HM_BFLOAT16, &bytes), HM_SUCCESS);
  EXPECT_EQ(bytes, 2u);
  // A bad color is reported after every rank has taken part (no one is left waiting).
  hm_comm_t sub = nullptr;
  EXPECT_EQ(hm_comm_split(c, -5, 0, &sub), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sub, nullptr);
  // None of that broke the communicator.
  hm_status_t async = HM_ERR_INTERNAL;
  EXPECT_EQ(hm_comm_get_async_error(c, &async), HM_SUCCESS);
  EXPECT_EQ(async, HM_SUCCESS);
  EXPECT_EQ(hm_allreduce(c, x, y, 4, HM_FLOAT32, HM_SUM), HM_SUCCESS);
  EXPECT_EQ(y[3], 4.0f * size);
}

TEST(InvalidArgumentTest, BadConfig) {
  hm_comm_t comm = nullptr;
  EXPECT_EQ(hm_init(nullptr, &comm), HM_ERR_INVALID_ARGUMENT);
  hm_config_t config = HM_CONFIG_INITIALIZER;
  config.size = 3;  // not initialised from HM_CONFIG_INITIALIZER
  EXPECT_EQ(hm_init(&config, &comm), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "HM_CONFIG_INITIALIZER"));
  config = HM_CONFIG_INITIALIZER;
  config.rank = 1000000;
  EXPECT_EQ(hm_init(&config, &comm), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "outside")) << hm_last_error_message();
  config = HM_CONFIG_INITIALIZER;
  config.sockets_per_peer = 99;
  EXPECT_EQ(hm_init(&config, &comm), HM_ERR_INVALID_ARGUMENT);
  config = HM_CONFIG_INITIALIZER;
  config.store = "no-port-here";
  EXPECT_EQ(hm_init(&config, &comm), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(comm, nullptr);
  EXPECT_STREQ(hm_status_string(HM_ERR_PEER_FAILED), "HM_ERR_PEER_FAILED");
  EXPECT_STREQ(hm_status_string(static_cast<hm_status_t>(999)), "HM_ERR_UNKNOWN_STATUS");
}

// Ranks pass different counts to the same allreduce: HM_ERR_MISMATCH, not corrupted data.
// Fault tests give their communicator a timeout well below the world's, so that even a slow
// failure ends there before any world collective gives up.
constexpr int kFaultTimeoutMs = 15000;

// Every rank ended with a failure that a disagreement explains, and one saw it itself.
void expect_disagreement_seen(const std::vector<std::uint64_t>& all) {
  bool someone_saw_mismatch = false;
  for (auto s : all) {
    EXPECT_TRUE(s == HM_ERR_MISMATCH || s == HM_ERR_PEER_FAILED || s == HM_ERR_ABORTED)
        << "status " << hm_status_string(static_cast<hm_status_t>(s));
    someone_saw_mismatch |= s == HM_ERR_MISMATCH;
  }
  EXPECT_TRUE(someone_saw_mismatch);
}

TEST(MismatchTest, DifferentCountsAreDetected) {
  CComm comm(kFaultTimeoutMs);
  int rank = 0;
  hm_comm_rank(comm.handle, &rank);
  std::vector<float> data(64, 1.0f);
  const size_t count = rank == 0 ? 32 : 64;
  const hm_status_t status =
      hm_allreduce(comm.handle, data.data(), data.data(), count, HM_FLOAT32, HM_SUM);
  const std::string message = hm_last_error_message();
  const auto all = gather_all(static_cast<std::uint64_t>(status));
  expect_disagreement_seen(all);
  if (status == HM_ERR_MISMATCH) {
    EXPECT_TRUE(mentions(message.c_str(), "rank")) << message;
  }
  // Afterwards the communicator reports the failure and refuses work.
  hm_status_t async = HM_SUCCESS;
  hm_comm_get_async_error(comm.handle, &async);
  EXPECT_EQ(async, status);
  EXPECT_EQ(hm_barrier(comm.handle), status);
}

// One rank's count fits the shared board (one host, 16 KiB) and the others' does not, so it
// waits for publications while they exchange messages: the probes and verdicts still end every
// call with HM_ERR_MISMATCH, well before the timeout.
TEST(MismatchTest, CountsOnBothSidesOfTheSharedBoardAreDetected) {
  CComm comm(kFaultTimeoutMs);
  int rank = 0;
  hm_comm_rank(comm.handle, &rank);
  std::vector<float> data(16384, 1.0f);  // 64 KiB
  const size_t count = rank == 0 ? 1024 : data.size();
  const auto start = std::chrono::steady_clock::now();
  const hm_status_t status =
      hm_allreduce(comm.handle, data.data(), data.data(), count, HM_FLOAT32, HM_SUM);
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string message = hm_last_error_message();
  EXPECT_LT(took, std::chrono::milliseconds(3000)) << message;
  const auto all = gather_all(static_cast<std::uint64_t>(status));
  expect_disagreement_seen(all);
}

TEST(MismatchTest, DifferentDtypesAreDetected) {
  CComm comm(kFaultTimeoutMs);
  int rank = 0;
  hm_comm_rank(comm.handle, &rank);
  std::vector<std::int32_t> data(16, 1);
  // Same byte count, different dtype: only the signature tells them apart.
  const hm_dtype_t dtype = rank == 0 ? HM_INT32 : HM_FLOAT32;
  const hm_status_t status = hm_allreduce(comm.handle, data.data(), data.data(), 16, dtype, HM_SUM);
  const auto all = gather_all(static_cast<std::uint64_t>(status));
  bool someone_saw_mismatch = false;
  for (auto s : all) someone_saw_mismatch |= s == HM_ERR_MISMATCH;
  EXPECT_TRUE(someone_saw_mismatch);
  EXPECT_NE(status, HM_SUCCESS);
}

// Rank 0 calls something else than the others in the same slot: another op, another root, or
// another collective over the same bytes. No rank that receives may succeed (nothing is reduced
// with the wrong partner), and none waits for the timeout: a different op or collective is
// HM_ERR_MISMATCH as soon as a message of the other operation arrives; roots that disagree can
// leave every rank waiting for the other (nobody sends), which the probes end (every rank ends
// with HM_ERR_MISMATCH within a second, test_disagreement.cpp has more patterns). A broadcast
// root only sends, so it may succeed.
class DisagreementTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DisagreementTest, NoReceiverSucceeds) {
  const std::string what = GetParam();
  CComm comm(3000);
  int rank = 0, size = 0;
  hm_comm_rank(comm.handle, &rank);
  hm_comm_size(comm.handle, &size);
  std::vector<float> data(256, 1.0f);
  hm_status_t status = HM_SUCCESS;
  int sender_only = -1;  // a rank whose call only sends
  const auto start = std::chrono::steady_clock::now();
  if (what == "op") {
    status = hm_allreduce(comm.handle, data.data(), data.data(), data.size(), HM_FLOAT32,
                          rank == 0 ? HM_MAX : HM_SUM);
  } else if (what == "root") {
    // Rank 0 is the others' root and waits for rank 1, which it takes for the root; with two
    // ranks each waits for the other.
    status = hm_broadcast(comm.handle, data.data(), data.size(), HM_FLOAT32, rank == 0 ? 1 : 0);
  } else {  // "collective"
    status = rank == 0 ? hm_broadcast(comm.handle, data.data(), data.size(), HM_FLOAT32, 0)
                       : hm_allreduce(comm.handle, data.data(), data.data(), data.size(),
                                      HM_FLOAT32, HM_SUM);
    sender_only = 0;
  }
  const auto took = std::chrono::steady_clock::now() - start;
  const std::string message = hm_last_error_message();
  EXPECT_LT(took, std::chrono::milliseconds(1500)) << what << ": " << message;
  const auto all = gather_all(static_cast<std::uint64_t>(status));
  for (int r = 0; r < size; ++r) {
    const auto s = static_cast<hm_status_t>(all[static_cast<std::size_t>(r)]);
    if (r == sender_only && s == HM_SUCCESS) continue;
    if (what == "root") {
      EXPECT_EQ(s, HM_ERR_MISMATCH) << what << ": rank " << r << " got " << hm_status_string(s);
    } else {
      EXPECT_TRUE(s == HM_ERR_MISMATCH || s == HM_ERR_PEER_FAILED || s == HM_ERR_ABORTED)
          << what << ": rank " << r << " got " << hm_status_string(s);
    }
  }
  if (what == "root") {
    // Both views: this rank's root and the one a peer named.
    EXPECT_TRUE(mentions(message.c_str(), rank == 0 ? "with root 1:" : "with root 0:")) << message;
  }
  bool someone_saw_mismatch = false;
  for (auto s : all) someone_saw_mismatch |= s == HM_ERR_MISMATCH;
  EXPECT_TRUE(someone_saw_mismatch) << what;
}

INSTANTIATE_TEST_SUITE_P(Mismatch, DisagreementTest, ::testing::Values("op", "root", "collective"));

// Rank 0 waits for a message nobody sends: from rank 1 (hm_recv), or from any source
// (hm_recv_any).
class SilentPeerTest : public ::testing::TestWithParam<bool> {
 protected:
  static bool any_source() { return GetParam(); }
  static hm_status_t receive_one(hm_comm_t comm) {
    std::int32_t value = 0;
    int source = -1;
    return any_source() ? hm_recv_any(comm, &value, 1, HM_INT32, &source)
                        : hm_recv(comm, &value, 1, HM_INT32, 1);
  }
};

// HM_ERR_TIMEOUT after the timeout, naming rank 1 (or the receive from any source).
TEST_P(SilentPeerTest, TimesOutNamingIt) {
  constexpr int kTimeoutMs = 700;
  CComm comm(kTimeoutMs);
  int rank = 0;
  hm_comm_rank(comm.handle, &rank);
  if (rank == 0) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(receive_one(comm.handle), HM_ERR_TIMEOUT);
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_TRUE(mentions(hm_last_error_message(), any_source() ? "recv from any source" : "rank 1"))
        << hm_last_error_message();
    EXPECT_GE(took, std::chrono::milliseconds(kTimeoutMs));
    EXPECT_LT(took, std::chrono::milliseconds(kTimeoutMs + 3000));
    hm_status_t async = HM_SUCCESS;
    hm_comm_get_async_error(comm.handle, &async);
    EXPECT_EQ(async, HM_ERR_TIMEOUT);
  }
  world().barrier();  // rank 1 stays until rank 0 has timed out
}

// hm_comm_abort from another thread wakes a thread blocked in the receive, at once.
TEST_P(SilentPeerTest, AbortWakesTheBlockedThread) {
  CComm comm(kFaultTimeoutMs);
  int rank = 0;
  hm_comm_rank(comm.handle, &rank);
  if (rank == 0) {
    std::atomic<hm_status_t> result{HM_SUCCESS};
    const auto start = std::chrono::steady_clock::now();
    std::thread blocked([&] { result = receive_one(comm.handle); });
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto abort_start = std::chrono::steady_clock::now();
    EXPECT_EQ(hm_comm_abort(comm.handle), HM_SUCCESS);
    EXPECT_LT(std::chrono::steady_clock::now() - abort_start, std::chrono::milliseconds(100))
        << "hm_comm_abort blocked";
    blocked.join();
    EXPECT_EQ(result.load(), HM_ERR_ABORTED);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    hm_status_t async = HM_SUCCESS;
    hm_comm_get_async_error(comm.handle, &async);
    EXPECT_EQ(async, HM_ERR_ABORTED);
    EXPECT_EQ(hm_barrier(comm.handle), HM_ERR_ABORTED);
  }
  world().barrier();
}

INSTANTIATE_TEST_SUITE_P(Receives, SilentPeerTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "AnySource" : "FromRank1";
                         });

// hm_recv_any and hm_irecv_any (finished through hm_test) take every other rank's two messages
// and name each sender; each sender's messages come in the order it sent them.
TEST(AnySourceCTest, ReceivesNameTheirSenders) {
  CComm comm;
  hm_comm_t c = comm.handle;
  int rank = -1;
  int size = 0;
  ASSERT_EQ(hm_comm_rank(c, &rank), HM_SUCCESS);
  ASSERT_EQ(hm_comm_size(c, &size), HM_SUCCESS);
  std::int32_t x = 0;
  EXPECT_EQ(hm_send(c, &x, 1, HM_INT32, HM_ANY_SOURCE), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "HM_ANY_SOURCE")) << hm_last_error_message();
  EXPECT_EQ(hm_recv_any(c, &x, 1, HM_INT32, nullptr), HM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(mentions(hm_last_error_message(), "source is NULL")) << hm_last_error_message();
  hm_request_t request = nullptr;
  EXPECT_EQ(hm_irecv_any(c, &x, 1, HM_INT32, nullptr, &request), HM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(request, nullptr);
  if (size == 1) return;
  if (rank != 0) {
    const std::int32_t mine[2] = {rank, 100 + rank};
    EXPECT_EQ(hm_send(c, &mine[0], 1, HM_INT32, 0), HM_SUCCESS) << hm_last_error_message();
    EXPECT_EQ(hm_send(c, &mine[1], 1, HM_INT32, 0), HM_SUCCESS) << hm_last_error_message();
  } else {
    std::vector<int> taken(static_cast<std::size_t>(size), 0);
    auto check = [&](std::int32_t got, int source) {
      ASSERT_TRUE(source >= 1 && source < size) << "source " << source;
      const int m = taken[static_cast<std::size_t>(source)]++;
      EXPECT_EQ(got, 100 * m + source) << "message " << m << " of rank " << source;
    };
    for (int i = 0; i < size - 1; ++i) {
      std::int32_t got = -1;
      int source = -1;
      EXPECT_EQ(hm_recv_any(c, &got, 1, HM_INT32, &source), HM_SUCCESS) << hm_last_error_message();
      check(got, source);
    }
    for (int i = 0; i < size - 1; ++i) {
      std::int32_t got = -1;
      int source = -1;
      ASSERT_EQ(hm_irecv_any(c, &got, 1, HM_INT32, &source, &request), HM_SUCCESS);
      int done = 0;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (done == 0 && std::chrono::steady_clock::now() < deadline) {
        EXPECT_EQ(hm_test(&request, &done), HM_SUCCESS) << hm_last_error_message();
        if (done == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ASSERT_EQ(done, 1) << "hm_test never finished the receive";
      EXPECT_EQ(request, nullptr);
      check(got, source);
    }
    for (int s = 1; s < size; ++s) EXPECT_EQ(taken[static_cast<std::size_t>(s)], 2);
  }
  EXPECT_EQ(hm_barrier(c), HM_SUCCESS);
}

}  // namespace
}  // namespace holmes::test
