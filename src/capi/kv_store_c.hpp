// A C caller's hm_kv_store_t as the C++ API's KeyValueStore: checks the struct once, then turns
// each function's nonzero result into a holmes::Error.
#pragma once

#include <holmes/holmes.h>
#include <holmes/holmes.hpp>

#include <memory>

namespace holmes::capi {

// Throws HM_ERR_INVALID_ARGUMENT naming what is wrong (size, a NULL function).
std::shared_ptr<KeyValueStore> kv_store_from_c(const hm_kv_store_t& store);

}  // namespace holmes::capi
