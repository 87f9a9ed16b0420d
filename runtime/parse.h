// Whole-string integer parsing for flags and one-line case strings: every
// character must belong to the number ("12x", "", " 3" and out-of-range
// values are rejected), so nothing is silently truncated.
#ifndef ATTNKIT_RUNTIME_PARSE_H_
#define ATTNKIT_RUNTIME_PARSE_H_

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>
#include <system_error>

namespace attnkit {

template <typename T>
std::optional<T> ParseInteger(std::string_view s) {
  T v{};
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) {
    return std::nullopt;
  }
  return v;
}

inline std::optional<int64_t> ParseInt64(std::string_view s) {
  return ParseInteger<int64_t>(s);
}
inline std::optional<uint64_t> ParseUint64(std::string_view s) {
  return ParseInteger<uint64_t>(s);
}

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_PARSE_H_
