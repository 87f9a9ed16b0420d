#include "runtime/cpu_features.h"

#include <cpuid.h>

namespace attnkit {

bool CpuHasAvx512Bf16() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return ((a >> 5) & 1u) != 0;
  }();
  return has;
}

}  // namespace attnkit
