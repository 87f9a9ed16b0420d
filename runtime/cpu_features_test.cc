#include "runtime/cpu_features.h"

#include <gtest/gtest.h>

namespace attnkit {
namespace {

// The CPUID bit read by hand against the compiler's own detection (libgcc's
// __cpu_model): a wrong leaf, sub-leaf or bit disagrees on a CPU that has
// AVX512_BF16 (this machine) and on most that do not.
TEST(CpuFeaturesTest, Avx512Bf16AgreesWithTheCompilersDetection) {
  __builtin_cpu_init();
  EXPECT_EQ(CpuHasAvx512Bf16(), __builtin_cpu_supports("avx512bf16") != 0);
}

}  // namespace
}  // namespace attnkit
