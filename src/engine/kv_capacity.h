// The scheduler admits against kvcache::KvCapacity (src/kvcache/kv_capacity.h),
// which both KV stores implement; this name keeps engine code unqualified.
#pragma once

#include "kvcache/kv_capacity.h"

namespace vpod::engine {

using kvcache::KvCapacity;

}  // namespace vpod::engine
