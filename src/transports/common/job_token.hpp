// How every transport proves the job token, in one place. Each proof is an HMAC keyed by the
// token (bootstrap/auth.hpp) over a role, two nonces and a binding that names what it is for:
// the transport, the communicator and the direction ("data|comm-7|0->3|1/2",
// "verbs|comm-7|0->3"). The token itself never leaves the process.
//
// - Connections (tcp, verbs handshakes) run challenge, proof and verdict (TokenChallenge on the
//   listening side, TokenAnswer on the dialing side): both sides prove the token with fresh
//   nonces, so neither talks to a stranger or to an endpoint of another communicator.
// - Shared memory has no connection: the owner of a segment and every producer that attaches
//   write proofs into the segment with nonces they publish there (shm/segment.hpp).
// - ucx messages carry a cookie: a proof with no nonces, bound to the communicator.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "bootstrap/auth.hpp"

namespace holmes {

class JobToken {
 public:
  JobToken(std::string token, std::string context)
      : token_(std::move(token)), context_(std::move(context)) {}

  // The communicator's name in the job, part of every binding.
  const std::string& context() const { return context_; }

  // HMAC(token, role | data channel | server nonce | client nonce | binding).
  auth::Mac mac(auth::Role role, const auth::Nonce& server_nonce, const auth::Nonce& client_nonce,
                std::string_view binding) const;
  // Whether `theirs` is that MAC (constant time).
  bool proves(const auth::Mac& theirs, auth::Role role, const auth::Nonce& server_nonce,
              const auth::Nonce& client_nonce, std::string_view binding) const;

 private:
  std::string token_;
  std::string context_;
};

// The listening side of one connection's handshake: a challenge with a fresh nonce, then the
// verdict on the dialer's proof.
class TokenChallenge {
 public:
  TokenChallenge();
  std::array<std::uint8_t, auth::Challenge::kWireBytes> encode() const;
  // Accepted, with this side's own proof, when `proof` proves the token for `binding`; refused
  // (no MAC) otherwise.
  auth::Verdict judge(const JobToken& token, const auth::Proof& proof,
                      std::string_view binding) const;

 private:
  auth::Nonce server_nonce_{};
};

// The dialing side: the proof answering a challenge, then the check of the listener's verdict.
class TokenAnswer {
 public:
  // False when `challenge` is not a Holmes data-channel challenge (nothing is answered).
  bool answer(std::span<const std::uint8_t, auth::Challenge::kWireBytes> challenge,
              const JobToken& token, std::string_view binding, auth::Proof& proof);
  // Whether the verdict accepts this side and carries the listener's proof for the same nonces.
  bool trusts(const auth::Verdict& verdict, const JobToken& token, std::string_view binding) const;

 private:
  auth::Nonce server_nonce_{};
  auth::Nonce client_nonce_{};
};

}  // namespace holmes
