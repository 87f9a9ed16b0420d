#include "runtime/flags.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "runtime/parse.h"

namespace attnkit {
namespace {

// 1048576 -> "2^20"; other values as they are.
std::string Bound(uint64_t v) {
  if (v >= (uint64_t{1} << 20) && std::has_single_bit(v)) {
    return "2^" + std::to_string(std::countr_zero(v));
  }
  return std::to_string(v);
}

std::string SignedBound(int64_t v) {
  return v < 0 ? "-" + Bound(0 - static_cast<uint64_t>(v))
               : Bound(static_cast<uint64_t>(v));
}

bool LooksLikeFlag(std::string_view a) { return a.size() > 1 && a[0] == '-'; }

}  // namespace

std::string IntegerRange(int64_t lo, int64_t hi) {
  return "[" + SignedBound(lo) + ", " + SignedBound(hi) + "]";
}

FlagParser::FlagParser(std::string usage, std::string description)
    : usage_(std::move(usage)), description_(std::move(description)) {}

FlagParser& FlagParser::Add(Flag f) {
  flags_.push_back(std::move(f));
  return *this;
}

FlagParser& FlagParser::Custom(std::string name, std::string value_name,
                               std::string help, Setter set) {
  return Add({std::move(name), std::move(value_name), std::move(help),
              std::move(set)});
}

FlagParser& FlagParser::String(std::string name, std::string* target,
                               std::string value_name, std::string help) {
  return Custom(std::move(name), std::move(value_name), std::move(help),
                [target](std::string_view v) {
                  *target = std::string(v);
                  return std::string();
                });
}

FlagParser& FlagParser::NonEmptyString(std::string name, std::string* target,
                                       std::string value_name, std::string help,
                                       std::string why_empty) {
  return Custom(std::move(name), std::move(value_name), std::move(help),
                [target, why_empty](std::string_view v) {
                  if (v.empty()) return why_empty;
                  *target = std::string(v);
                  return std::string();
                });
}

FlagParser& FlagParser::Strings(std::string name,
                                std::vector<std::string>* target,
                                std::string value_name, std::string help,
                                std::string why_empty) {
  return Custom(std::move(name), std::move(value_name), std::move(help),
                [target, why_empty](std::string_view v) {
                  if (v.empty()) return why_empty;
                  target->emplace_back(v);
                  return std::string();
                });
}

FlagParser& FlagParser::Int64(std::string name, int64_t* target, int64_t min,
                              int64_t max, std::string help,
                              std::string value_name) {
  return Custom(std::move(name), std::move(value_name), std::move(help),
                [target, min, max](std::string_view v) {
                  const auto n = ParseInt64(v);
                  if (!n || *n < min || *n > max) {
                    return "not an integer in " + IntegerRange(min, max);
                  }
                  *target = *n;
                  return std::string();
                });
}

FlagParser& FlagParser::Uint64(std::string name, uint64_t* target,
                               std::string help, uint64_t max,
                               std::string value_name) {
  return Custom(std::move(name), std::move(value_name), std::move(help),
                [target, max](std::string_view v) {
                  const auto n = ParseUint64(v);
                  if (!n || *n > max) {
                    return max == UINT64_MAX
                               ? std::string("not a non-negative integer")
                               : "not an integer in [0, " + Bound(max) + "]";
                  }
                  *target = *n;
                  return std::string();
                });
}

FlagParser& FlagParser::Seconds(std::string name, double* target, double max,
                                std::string help) {
  return Custom(std::move(name), "SECONDS", std::move(help),
                [target, max](std::string_view v) {
                  const std::string text(v);
                  char* end = nullptr;
                  const double s = std::strtod(text.c_str(), &end);
                  if (text.empty() || end != text.c_str() + text.size() ||
                      !(s > 0) || s > max) {
                    char bound[32];
                    std::snprintf(bound, sizeof(bound), "%g", max);
                    std::string b = bound;  // 1e+07 -> 1e7
                    if (const size_t e = b.find("e+"); e != std::string::npos) {
                      size_t digits = e + 2;
                      while (digits + 1 < b.size() && b[digits] == '0') {
                        ++digits;
                      }
                      b = b.substr(0, e + 1) + b.substr(digits);
                    }
                    return "not a number of seconds in (0, " + b + "]";
                  }
                  *target = s;
                  return std::string();
                });
}

FlagParser& FlagParser::Bool(std::string name, bool* target, std::string help) {
  return Add(
      {std::move(name), "", std::move(help), [target](std::string_view v) {
         if (v == "true" || v == "1") {
           *target = true;
         } else if (v == "false" || v == "0") {
           *target = false;
         } else {
           return std::string("not true|false");
         }
         return std::string();
       }});
}

FlagParser& FlagParser::Positional(std::vector<std::string>* out) {
  positional_ = out;
  return *this;
}

FlagParser& FlagParser::PassUnknown(std::vector<std::string>* out) {
  unknown_ = out;
  return *this;
}

FlagParser& FlagParser::Epilogue(std::string text) {
  epilogue_ = std::move(text);
  return *this;
}

const FlagParser::Flag* FlagParser::Find(std::string_view name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool FlagParser::Seen(std::string_view name) const {
  return seen_.find(name) != seen_.end();
}

Status FlagParser::Parse(std::span<char* const> args) {
  help_ = false;
  seen_.clear();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (!LooksLikeFlag(a)) {
      if (positional_ == nullptr) {
        return Status::InvalidArgument("unexpected argument '" +
                                       std::string(a) + "'");
      }
      positional_->emplace_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string_view name = a.substr(0, eq);
    const Flag* f = Find(name);
    if (f == nullptr) {
      if (unknown_ != nullptr) {
        unknown_->emplace_back(a);
        continue;
      }
      return Status::InvalidArgument(std::string(name) +
                                     ": unknown flag (see --help)");
    }
    std::string_view value;
    if (eq != std::string_view::npos) {
      value = a.substr(eq + 1);
    } else if (f->value_name.empty()) {
      value = "true";  // a boolean flag alone
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return Status::InvalidArgument(std::string(name) + " needs a value");
    }
    const std::string why = f->set(value);
    if (!why.empty()) {
      return Status::InvalidArgument(std::string(name) + "=" +
                                     std::string(value) + ": " + why);
    }
    seen_.emplace(name);
  }
  return Status::Ok();
}

std::string FlagParser::Usage() const {
  // Names (and values) up to this width share the line with their help.
  constexpr size_t kHelpColumn = 22;
  std::string s = "usage: " + usage_ + "\n";
  if (!description_.empty()) s += "\n" + description_ + "\n";
  s += "\n";
  auto entry = [&](const std::string& name, const std::string& value_name,
                   const std::string& help) {
    std::string head = "  " + name;
    if (!value_name.empty()) head += " " + value_name;
    if (head.size() + 1 < kHelpColumn) {
      head.resize(kHelpColumn, ' ');
    } else {
      head += "\n" + std::string(kHelpColumn, ' ');
    }
    s += head;
    for (char c : help) {
      s += c;
      if (c == '\n') s += std::string(kHelpColumn, ' ');
    }
    s += "\n";
  };
  for (const Flag& f : flags_) entry(f.name, f.value_name, f.help);
  entry("--help", "", "this text");
  if (!epilogue_.empty()) s += "\n" + epilogue_;
  if (!s.empty() && s.back() != '\n') s += '\n';
  return s;
}

}  // namespace attnkit
