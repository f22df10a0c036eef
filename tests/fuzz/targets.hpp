// Fuzz targets: one function per decoder of untrusted input, shared by the libFuzzer binaries
// (fuzz_main.cpp, clang only) and the replay test that runs in the normal suite (replay_test.cpp,
// any compiler). Each function feeds `data` to the decoder as the library receives it and checks
// what comes back. holmes::Error is the decoders' one acceptable way to refuse input; anything
// else that escapes (another exception, including Finding below), a crash or a sanitizer report
// is a finding.
#pragma once

#include <cstdint>
#include <span>
#include <stdexcept>
#include <string_view>

namespace holmes::fuzz {

// A decoder accepted input but broke one of its own promises (e.g. a decoded header whose
// fields are out of bounds, or a decoded request that does not encode back to the same bytes).
class Finding : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

using Input = std::span<const std::uint8_t>;

// The tcp transport's 40-byte fragment header (transports/tcp/frame.hpp); shorter inputs are
// zero-padded, longer ones cut.
void frame_header(Input data);
// The store server's side: a request frame (u32 length + body) as read from a client, and the
// client's proof of the job token (bootstrap/auth.hpp).
void store_request(Input data);
// The store client's side: a reply frame, the server's challenge and verdict, an ADD reply's
// counter, and a peer card (communicator/peer_card.hpp), the value every rank reads back.
void store_reply(Input data);
// A topology file (topology/topology_file.hpp: parse_topology_yaml).
void topology_file(Input data);
// A model file (planner/model_spec.hpp: parse_model_yaml).
void model_file(Input data);

struct Target {
  std::string_view name;  // also the folder of its seed corpus: tests/fuzz/corpus/<name>/
  void (*run)(Input data);
};

// Every target, in a fixed order.
std::span<const Target> all_targets();

}  // namespace holmes::fuzz
