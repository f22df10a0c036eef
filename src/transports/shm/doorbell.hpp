// The doorbell: how anyone wakes a segment owner's progress thread.
//
// The owner sleeps on one futex word in its own segment (shared, not FUTEX_PRIVATE, so other
// processes can wake it). Whoever has news for it - a peer that wrote records into its ring or
// freed space in a ring it writes, the owner's own caller threads with new requests - bumps the
// word and, only when the owner says it sleeps and none of its threads polls, makes the wake
// system call. The owner reads the
// word before looking for work and sleeps only if it has not moved since, so a bump can never
// be lost between "nothing to do" and "asleep".
#pragma once

#include <chrono>
#include <cstdint>

#include "transports/shm/layout.hpp"

namespace holmes::shm {

// Tells the owner of `header` there is news (any process, any thread): wakes its progress
// thread, unless one of the owner's threads is polling and will see it anyway.
void ring_doorbell(SegmentHeader& header);

// The owner only: wakes its own progress thread whether or not anyone polls.
void wake_owner(SegmentHeader& header);

// The owner only: a thread starts or stops polling the owner's rings itself (see
// SegmentHeader::polling). Whoever stops must then make sure nothing that arrived meanwhile is
// left unseen (wake_owner when in doubt).
void start_polling(SegmentHeader& header);
void stop_polling(SegmentHeader& header);

// The owner only: the value to hand to sleep_on_doorbell, read before looking for work.
std::uint32_t doorbell_value(SegmentHeader& header);

// The owner only: sleeps until the doorbell has moved past `seen`, or `timeout` has passed, or a
// signal arrives (the caller loops anyway).
void sleep_on_doorbell(SegmentHeader& header, std::uint32_t seen, std::chrono::nanoseconds timeout);

// A word in shared memory that readers wait for (a board slot's round): the writer stores
// `value` and wakes the readers that count themselves in `waiters`; a reader sleeps until the
// word holds `value` (or moves at all), at most `timeout`. Same ordering argument as the doorbell.
void publish_word(std::uint32_t& word, std::uint32_t value, std::uint32_t& waiters);
void wait_for_word(std::uint32_t& word, std::uint32_t value, std::uint32_t& waiters,
                   std::chrono::nanoseconds timeout);

}  // namespace holmes::shm
