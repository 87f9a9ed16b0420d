#include "runtime/cpu_features.h"

#include <gtest/gtest.h>
#include <immintrin.h>
#include <sched.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace attnkit {
namespace {

// The CPUID bit read by hand against the compiler's own detection (libgcc's
// __cpu_model): a wrong leaf, sub-leaf or bit disagrees on a CPU that has
// AVX512_BF16 (this machine) and on most that do not.
TEST(CpuFeaturesTest, Avx512Bf16AgreesWithTheCompilersDetection) {
  __builtin_cpu_init();
  EXPECT_EQ(CpuHasAvx512Bf16(), __builtin_cpu_supports("avx512bf16") != 0);
}

// The flags the Linux kernel lists for cpu0 in /proc/cpuinfo.
std::string CpuinfoFlags() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) == 0) return line + " ";
  }
  return "";
}

// Zeroes tile 0 under a one-tile configuration and stores it: without the
// kernel's grant the configuration load raises SIGILL.
[[gnu::target("amx-tile"), gnu::noinline]] bool TileRoundTrips() {
  alignas(64) unsigned char config[64] = {};
  config[0] = 1;    // palette 1
  config[16] = 64;  // tile 0: 64 bytes a row
  config[48] = 16;  // tile 0: 16 rows
  alignas(64) float out[16 * 16];
  for (float& x : out) x = 1.0f;
  _tile_loadconfig(config);
  _tile_zero(0);
  _tile_stored(0, out, 64);
  _tile_release();
  for (float x : out)
    if (x != 0.0f) return false;
  return true;
}

// The probe agrees with the kernel's own reading of CPUID and XCR0 (it lists
// amx_tile and amx_bf16 only when the OS manages the tile state), and where
// it says yes the grant is real: a tile instruction runs.
TEST(CpuFeaturesTest, AmxBf16AgreesWithTheKernelAndTilesRun) {
  const std::string flags = CpuinfoFlags();
  if (flags.empty()) {
    GTEST_SKIP() << "no /proc/cpuinfo flags";
  }
  const bool listed = flags.find(" amx_tile ") != std::string::npos &&
                      flags.find(" amx_bf16 ") != std::string::npos;
  EXPECT_EQ(CpuHasAmxBf16(), listed);
  EXPECT_EQ(CpuHasAmxBf16(), CpuHasAmxBf16());  // asked once, cached
  if (CpuHasAmxBf16()) {
    EXPECT_TRUE(TileRoundTrips());
  }
}

// The probe behind the kernels' bf16 QK^T choice: no ratio without the
// instruction, a positive one with it, the same value on every call (measured
// once), and the choice follows it.
TEST(CpuFeaturesTest, Bf16DotProbeIsMeasuredOnceAndDecides) {
  const double ratio = CpuBf16DotMacRatio();
  if (!CpuHasAvx512Bf16()) {
    EXPECT_EQ(ratio, 0.0);
    EXPECT_FALSE(CpuBf16DotPays());
    return;
  }
  EXPECT_GT(ratio, 0.0);
  EXPECT_LT(ratio, 16.0) << "more than 8 vdpbf16ps per FMA: a broken probe";
  EXPECT_EQ(CpuBf16DotMacRatio(), ratio);
  EXPECT_EQ(CpuBf16DotPays(), ratio > 1.25);
}

// On a Linux machine with sysfs (CI and this one) the figure is the cache
// the kernel lists at the highest level, read once; never negative.
TEST(CpuFeaturesTest, LastLevelCacheIsTheHighestLevelTheKernelLists) {
  const int64_t bytes = LastLevelCacheBytes();
  EXPECT_EQ(LastLevelCacheBytes(), bytes);
  EXPECT_GE(bytes, 0);
  std::ifstream level("/sys/devices/system/cpu/cpu0/cache/index0/level");
  if (!level) GTEST_SKIP() << "no sysfs cache information";
  EXPECT_GE(bytes, int64_t{256} << 10) << "smaller than any L2 of an x86-64";
  // Not below the L2 the C library reports, where it reports one.
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 > 0) {
    EXPECT_GE(bytes, l2);
  }
}

// The private caches: read once, at least one L2 where sysfs lists one,
// and no more than one L2 per CPU we may run on.
TEST(CpuFeaturesTest, PrivateCachesAreTheLevelTwoCachesOfTheCoresWeRunOn) {
  const int64_t bytes = PrivateCacheBytes();
  EXPECT_EQ(PrivateCacheBytes(), bytes);
  EXPECT_GE(bytes, 0);
  std::ifstream size("/sys/devices/system/cpu/cpu0/cache/index2/size");
  if (!size) GTEST_SKIP() << "no sysfs cache information";
  EXPECT_GE(bytes, int64_t{256} << 10) << "smaller than any L2 of an x86-64";
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  // No more L2s than CPUs we may run on, each at most 4 MiB (x86-64 cores
  // so far have 256 KiB - 3 MiB).
  EXPECT_LE(bytes, int64_t{CPU_COUNT(&set)} * (int64_t{4} << 20));
}

// The L1 data cache: read once, what sysfs lists at level 1 where it lists
// one (x86-64 cores have 32-64 KiB), and never above the last level.
TEST(CpuFeaturesTest, L1DataCacheIsTheKernelsLevelOneDataCache) {
  const int64_t bytes = L1DataCacheBytes();
  EXPECT_EQ(L1DataCacheBytes(), bytes);
  EXPECT_GE(bytes, 0);
  std::ifstream level("/sys/devices/system/cpu/cpu0/cache/index0/level");
  if (!level) GTEST_SKIP() << "no sysfs cache information";
  EXPECT_GE(bytes, int64_t{16} << 10);
  EXPECT_LE(bytes, int64_t{256} << 10);
  EXPECT_LT(bytes, LastLevelCacheBytes());
}

}  // namespace
}  // namespace attnkit
