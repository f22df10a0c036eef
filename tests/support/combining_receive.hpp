// One combining receive (CombiningReceive::irecv_reduce) checked end to end, for the transports
// that offer them: rank 0 of a two-endpoint job sends `sent` to rank 1, which combines it with
// `own` (as uint32 sums, in place or into a separate buffer), its receive posted before the message
// or after it has arrived.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "transports/capabilities.hpp"
#include "transports/combine.hpp"
#include "transports/transport.hpp"
#include "uint32_sum.hpp"

namespace holmes::test {

inline void expect_combining_receive(Transport& sender, Transport& receiver,
                                     const std::vector<std::byte>& sent,
                                     const std::vector<std::byte>& own, bool receive_first,
                                     bool in_place) {
  const auto finishes = [](const CompletionPtr& c) {
    return c->wait_until(Deadline::after(std::chrono::seconds(10)));
  };
  std::vector<std::byte> buffer =
      in_place ? own : std::vector<std::byte>(own.size(), std::byte{0xEE});
  const ReceiveCombine how{in_place ? buffer.data() : own.data(), HM_UINT32, HM_SUM};
  CombiningReceive* combining = capability<CombiningReceive>(receiver);
  ASSERT_NE(combining, nullptr) << receiver.name() << " has no combining receives";
  CompletionPtr recv;
  if (receive_first) {
    recv = combining->irecv_reduce(0, 42, 7, buffer, how);
    ASSERT_NE(recv, nullptr);
  }
  auto send = sender.isend(1, 42, 7, sent);
  if (!receive_first) {
    // Let it arrive first: it waits in the transport (a ring, a parked message, kept pieces).
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    recv = combining->irecv_reduce(0, 42, 7, buffer, how);
    ASSERT_NE(recv, nullptr);
  }
  // The receive first: a send over a small shm ring completes only as it is read.
  ASSERT_TRUE(finishes(recv));
  ASSERT_EQ(recv->status(), HM_SUCCESS) << recv->message();
  ASSERT_TRUE(finishes(send));
  EXPECT_EQ(send->status(), HM_SUCCESS) << send->message();
  EXPECT_TRUE(buffer == uint32_sum(own, sent)) << own.size() << " bytes combined wrongly";
}

}  // namespace holmes::test
