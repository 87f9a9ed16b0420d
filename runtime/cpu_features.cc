#include "runtime/cpu_features.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "runtime/limits.h"

namespace attnkit {

bool CpuHasAvx512Bf16() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return ((a >> 5) & 1u) != 0;
  }();
  return has;
}

bool CpuHasAmxBf16() {
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = ((d >> 24) & 1u) != 0, bf16 = ((d >> 22) & 1u) != 0;
    const bool osxsave = (__get_cpuid(1, &a, &b, &c, &d) && ((c >> 27) & 1u));
    if (!tile || !bf16 || !osxsave) return false;
    // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS manages the state.
    uint32_t lo = 0, hi = 0;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3u) != 3u) return false;
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return has;
}

namespace {

constexpr int kChains = 16;       // independent accumulators: latency hidden
constexpr int64_t kSteps = 1000;  // instructions per chain per run
constexpr int kRuns = 7;          // best of: another tenant only slows a run

// TSC ticks of the fastest of kRuns runs of kChains x kSteps instructions.
// The results feed an asm barrier so that nothing is optimized away.
template <bool kDot>
[[gnu::target("avx512f,avx512bf16"), gnu::noinline]] uint64_t BestTicks() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1e-3f * c);
  const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-4f);
  const __m512bh xb = (__m512bh)_mm512_set1_epi32(0x3f7f3f7f);
  uint64_t best = UINT64_MAX;
  for (int run = 0; run < kRuns; ++run) {
    const uint64_t t0 = __rdtsc();
    for (int64_t i = 0; i < kSteps; ++i) {
#pragma GCC unroll 16
      for (int c = 0; c < kChains; ++c) {
        if constexpr (kDot) {
          acc[c] = _mm512_dpbf16_ps(acc[c], xb, xb);
        } else {
          acc[c] = _mm512_fmadd_ps(acc[c], x, y);
        }
      }
    }
    const uint64_t t = __rdtsc() - t0;
    best = std::min(best, t);
    for (int c = 0; c < kChains; ++c) asm volatile("" : "+v"(acc[c]));
  }
  return best;
}

}  // namespace

double CpuBf16DotMacRatio() {
  static const double ratio = [] {
    if (!CpuHasAvx512Bf16()) return 0.0;
    BestTicks<false>();  // warm up: the first AVX-512 code may run slower
    const uint64_t fma = BestTicks<false>();
    const uint64_t dot = BestTicks<true>();
    // Same instruction count: MACs per cycle of dot / of fma = 2 fma / dot.
    return dot == 0 ? 0.0 : 2.0 * static_cast<double>(fma) / dot;
  }();
  return ratio;
}

bool CpuBf16DotPays() { return CpuBf16DotMacRatio() > 1.25; }

namespace {

// The first line of a small sysfs file, "" when it cannot be read.
std::string ReadLine(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (f) std::getline(f, line);
  return line;
}

// CPUs in a sysfs CPU list ("0-3,8,10-11"); 0 if it does not parse.
int CountCpuList(const std::string& list) {
  int count = 0;
  size_t pos = 0;
  while (pos < list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string part = list.substr(pos, comma - pos);
    const size_t dash = part.find('-');
    const int first = std::atoi(part.c_str());
    const int last =
        dash == std::string::npos ? first : std::atoi(part.c_str() + dash + 1);
    if (last < first) return 0;
    count += last - first + 1;
    pos = comma + 1;
  }
  return count;
}

struct SysfsCache {
  int64_t bytes = 0;     // 0: sysfs lists no such cache
  int sharing_cpus = 0;  // 0: unknown
};

// The data or unified cache of cpu0 in sysfs at `level` (0: the highest
// level listed).
SysfsCache SysfsDataCache(int level) {
  int best_level = 0;
  SysfsCache cache;
  for (int index = 0; index < 16; ++index) {
    const std::string dir =
        "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    const std::string type = ReadLine(dir + "/type");
    if (type.empty()) break;
    if (type != "Data" && type != "Unified") continue;
    const int this_level = std::atoi(ReadLine(dir + "/level").c_str());
    // "32768K": --max-memory's format.
    const std::optional<int64_t> size = ParseByteSize(ReadLine(dir + "/size"));
    if (!size) continue;
    if (level > 0 ? this_level == level : this_level > best_level) {
      best_level = this_level;
      cache.bytes = *size;
      cache.sharing_cpus = CountCpuList(ReadLine(dir + "/shared_cpu_list"));
    }
  }
  return cache;
}

}  // namespace

int64_t LastLevelCacheBytes() {
  static const int64_t bytes = [] {
    if (const int64_t sysfs = SysfsDataCache(0).bytes; sysfs > 0) return sysfs;
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return llc > 0 ? static_cast<int64_t>(llc) : int64_t{0};
  }();
  return bytes;
}

int64_t PrivateCacheBytes() {
  static const int64_t bytes = [] {
    const SysfsCache sysfs = SysfsDataCache(2);
    int64_t l2 = sysfs.bytes;
    int sharing = sysfs.sharing_cpus;
    if (l2 <= 0) {
      const long libc = sysconf(_SC_LEVEL2_CACHE_SIZE);
      l2 = libc > 0 ? static_cast<int64_t>(libc) : int64_t{0};
      sharing = 1;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    const int cpus =
        sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    const int cores = std::max(1, cpus / std::max(1, sharing));
    return l2 * cores;
  }();
  return bytes;
}

int64_t L1DataCacheBytes() {
  static const int64_t bytes = [] {
    if (const int64_t sysfs = SysfsDataCache(1).bytes; sysfs > 0) return sysfs;
    const long l1 = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    return l1 > 0 ? static_cast<int64_t>(l1) : int64_t{0};
  }();
  return bytes;
}

}  // namespace attnkit
