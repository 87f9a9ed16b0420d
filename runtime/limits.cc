#include "runtime/limits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "runtime/parse.h"

namespace attnkit {

std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> CheckedProduct(std::initializer_list<int64_t> xs) {
  int64_t r = 1;
  for (int64_t x : xs) {
    auto m = CheckedMul(r, x);
    if (!m) return std::nullopt;
    r = *m;
  }
  return r;
}

MemoryEstimate& MemoryEstimate::Add(std::string what,
                                    std::initializer_list<double> factors) {
  double bytes = 1;
  for (double f : factors) bytes *= std::max(f, 0.0);
  total_ += bytes;
  items_.push_back({std::move(what), bytes});
  return *this;
}

namespace {

// A byte count as an integer when it is one, else in scientific notation.
std::string Bytes(double b) {
  char buf[48];
  if (b < 9e18) {
    std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(b));
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g", b);
  }
  return buf;
}

}  // namespace

Status MemoryEstimate::Check(int64_t max_bytes, std::string_view subject,
                             std::string_view flag) const {
  if (total_ <= static_cast<double>(max_bytes)) return Status::Ok();
  std::vector<Item> sorted = items_;
  std::stable_sort(
      sorted.begin(), sorted.end(),
      [](const Item& a, const Item& b) { return a.bytes > b.bytes; });
  std::string m = std::string(subject) + " needs an estimated " +
                  Bytes(total_) + " bytes (" + HumanBytes(total_) + ") but " +
                  std::string(flag) + "=" + std::to_string(max_bytes) + " (" +
                  HumanBytes(static_cast<double>(max_bytes)) + "): ";
  bool first = true;
  for (const Item& i : sorted) {
    if (i.bytes <= 0) continue;
    m += (first ? "" : ", ") + i.what + " " + Bytes(i.bytes) + " bytes";
    first = false;
  }
  m += "; raise " + std::string(flag) + " or shrink the sizes";
  return Status::ResourceExhausted(std::move(m));
}

std::string HumanBytes(double b) {
  if (b < 0) return "n/a";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) {
    b /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%.0f B", b);
  } else if (b >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%.3g %s", b, units[u]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", b, units[u]);
  }
  return buf;
}

std::optional<int64_t> ParseByteSize(std::string_view s) {
  int shift = 0;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K':
      case 'k':
        shift = 10;
        break;
      case 'M':
      case 'm':
        shift = 20;
        break;
      case 'G':
      case 'g':
        shift = 30;
        break;
      case 'T':
      case 't':
        shift = 40;
        break;
      default:
        break;
    }
    if (shift != 0) s.remove_suffix(1);
  }
  const auto n = ParseInt64(s);
  constexpr int64_t kMax = int64_t{1} << 62;
  if (!n || *n < 1 || *n > (kMax >> shift)) return std::nullopt;
  return *n << shift;
}

int64_t DefaultMaxMemory() {
  constexpr int64_t kFallback = int64_t{4} << 30;
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %lld kB", &kib) == 1) {
      if (kib <= 0) return kFallback;
      return static_cast<int64_t>(static_cast<double>(kib) * 1024 * 0.8);
    }
  }
  return kFallback;
}

namespace {
std::string& ActivityStorage() {
  static std::string* s = new std::string("starting");
  return *s;
}
}  // namespace

void SetActivity(std::string what) { ActivityStorage() = std::move(what); }
const std::string& Activity() { return ActivityStorage(); }

}  // namespace attnkit
