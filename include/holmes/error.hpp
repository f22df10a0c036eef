// holmes::Error: the exception the C++ API throws. It carries the same hm_status_t the C API
// returns, and a message that names the peer, link or argument that was wrong.
#pragma once

#include <holmes/holmes.h>

#include <stdexcept>
#include <string>

namespace holmes {

class HM_API Error : public std::runtime_error {
 public:
  Error(hm_status_t status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  hm_status_t status() const noexcept { return status_; }

 private:
  hm_status_t status_;
};

}  // namespace holmes
