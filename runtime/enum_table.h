// One table per enum: the {value, name} pairs every enum's name, parse,
// validity check and "a|b|c" list in error messages come from, so adding an
// enumerator is one line and no switch or parse loop can fall out of step.
//
//   enum class Color : uint8_t { kRed, kBlue };
//   inline constexpr auto kColors = MakeEnumTable<Color>({
//       {Color::kRed, "red"},
//       {Color::kBlue, "blue"},
//   });
//   static_assert(kColors.RoundTrips());  // unique values and names
//
//   kColors.Name(Color::kBlue)        -> "blue"
//   kColors.Name(Color{7})            -> "invalid"
//   kColors.Parse("red")              -> Color::kRed; Parse("x") -> nullopt
//   kColors.IsValid(Color{7})         -> false
//   kColors.Names()                   -> "red|blue"
//   kColors.NotOneOf("color", "x")    -> "color=x is not red|blue"
//
// Lookups are linear: tables are a handful of entries and every use is on a
// cold path (flags, reports, validation).
#ifndef ATTNKIT_RUNTIME_ENUM_TABLE_H_
#define ATTNKIT_RUNTIME_ENUM_TABLE_H_

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace attnkit {

template <typename E>
struct EnumEntry {
  E value;
  std::string_view name;
};

template <typename E, size_t N>
class EnumTable {
 public:
  static_assert(N > 0, "an enum table needs at least one entry");

  constexpr explicit EnumTable(const std::array<EnumEntry<E>, N>& entries)
      : entries_(entries) {}

  // The entry's name; `invalid` for a value no entry has (a cast integer).
  constexpr std::string_view Name(E v,
                                  std::string_view invalid = "invalid") const {
    for (const EnumEntry<E>& e : entries_) {
      if (e.value == v) return e.name;
    }
    return invalid;
  }

  // The value named exactly `s` (case-sensitive), or nullopt.
  constexpr std::optional<E> Parse(std::string_view s) const {
    for (const EnumEntry<E>& e : entries_) {
      if (e.name == s) return e.value;
    }
    return std::nullopt;
  }

  constexpr bool IsValid(E v) const {
    for (const EnumEntry<E>& e : entries_) {
      if (e.value == v) return true;
    }
    return false;
  }

  // Every name in table order, joined by `sep`: "none|causal|window|bias".
  std::string Names(std::string_view sep = "|") const {
    std::string s;
    for (size_t i = 0; i < N; ++i) {
      if (i) s += sep;
      s += entries_[i].name;
    }
    return s;
  }

  // The message of a bad name: "<field>=<value> is not a|b|c".
  std::string NotOneOf(std::string_view field, std::string_view value) const {
    return std::string(field) + "=" + std::string(value) + " is not " + Names();
  }

  // True when no two entries share a value or a name and no name is empty,
  // i.e. Parse(Name(v)) == v for every entry and Name(Parse(s)) == s for
  // every name. Every table is static_assert-ed with it where it is defined.
  constexpr bool RoundTrips() const {
    for (size_t i = 0; i < N; ++i) {
      if (entries_[i].name.empty()) return false;
      for (size_t j = i + 1; j < N; ++j) {
        if (entries_[i].value == entries_[j].value) return false;
        if (entries_[i].name == entries_[j].name) return false;
      }
    }
    return true;
  }

  static constexpr size_t size() { return N; }
  constexpr const EnumEntry<E>* begin() const { return entries_.data(); }
  constexpr const EnumEntry<E>* end() const { return entries_.data() + N; }
  constexpr const EnumEntry<E>& operator[](size_t i) const {
    return entries_[i];
  }

 private:
  std::array<EnumEntry<E>, N> entries_;
};

// MakeEnumTable<E>({{E::kA, "a"}, {E::kB, "b"}}): the entry count is
// deduced from the list.
template <typename E, size_t N>
constexpr EnumTable<E, N> MakeEnumTable(EnumEntry<E> const (&entries)[N]) {
  std::array<EnumEntry<E>, N> a{};
  for (size_t i = 0; i < N; ++i) a[i] = entries[i];
  return EnumTable<E, N>(a);
}

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_ENUM_TABLE_H_
