#include "runtime/stats.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace attnkit {

double Median(std::span<const double> v) {
  if (v.empty()) return std::nan("");
  std::vector<double> s(v.begin(), v.end());
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  return n % 2 == 1 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

}  // namespace attnkit
