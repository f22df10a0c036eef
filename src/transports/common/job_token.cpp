#include "transports/common/job_token.hpp"

namespace holmes {

auth::Mac JobToken::mac(auth::Role role, const auth::Nonce& server_nonce,
                        const auth::Nonce& client_nonce, std::string_view binding) const {
  return auth::compute_mac(token_, role, auth::Channel::kData, server_nonce, client_nonce, binding);
}

bool JobToken::proves(const auth::Mac& theirs, auth::Role role, const auth::Nonce& server_nonce,
                      const auth::Nonce& client_nonce, std::string_view binding) const {
  return auth::macs_equal(mac(role, server_nonce, client_nonce, binding), theirs);
}

TokenChallenge::TokenChallenge() : server_nonce_(auth::random_nonce()) {}

std::array<std::uint8_t, auth::Challenge::kWireBytes> TokenChallenge::encode() const {
  auth::Challenge challenge;
  challenge.channel = auth::Channel::kData;
  challenge.server_nonce = server_nonce_;
  return challenge.encode();
}

auth::Verdict TokenChallenge::judge(const JobToken& token, const auth::Proof& proof,
                                    std::string_view binding) const {
  auth::Verdict verdict;
  if (token.proves(proof.mac, auth::Role::kClient, server_nonce_, proof.client_nonce, binding)) {
    verdict.accepted = true;
    verdict.mac = token.mac(auth::Role::kServer, server_nonce_, proof.client_nonce, binding);
  }
  return verdict;
}

bool TokenAnswer::answer(std::span<const std::uint8_t, auth::Challenge::kWireBytes> challenge,
                         const JobToken& token, std::string_view binding, auth::Proof& proof) {
  auth::Challenge decoded;
  if (!auth::Challenge::decode(challenge, auth::Channel::kData, decoded)) return false;
  server_nonce_ = decoded.server_nonce;
  client_nonce_ = auth::random_nonce();
  proof.client_nonce = client_nonce_;
  proof.mac = token.mac(auth::Role::kClient, server_nonce_, client_nonce_, binding);
  return true;
}

bool TokenAnswer::trusts(const auth::Verdict& verdict, const JobToken& token,
                         std::string_view binding) const {
  return verdict.accepted &&
         token.proves(verdict.mac, auth::Role::kServer, server_nonce_, client_nonce_, binding);
}

}  // namespace holmes
