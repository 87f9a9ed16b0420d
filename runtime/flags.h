// The one command-line flag parser of every attnkit tool (check, decode,
// bench, the bench tool, the fuzz replay drivers). A tool registers its flags
// with typed targets, parses, and gets a Status that names the bad flag and
// value; --help text is generated from the same registrations.
//
//   FlagParser flags("attnkit decode [flags]");
//   flags.Int64("--layers", &layers, 1, 4096, "attention layers (default 4)")
//       .Enum("--dtype", &dtype, kFloatDTypeNames, "storage of q, k, v")
//       .Strings("--plugin", &plugins, "LIB.so", "a plug-in (repeatable)");
//   Status s = flags.Parse(argc - 1, argv + 1);
//   if (flags.help()) { std::fputs(flags.Usage().c_str(), stdout); ... }
//
// Syntax: `--name=value` or `--name value` (the next argument is the value,
// whatever it looks like); a boolean flag is `--name` or `--name=true|false`
// and never takes the next argument. `--help` / `-h` set help(). Flags may
// come in any order, interleaved with positional arguments; a flag given
// twice keeps the last value (Strings() keeps every one).
//
// Errors are INVALID_ARGUMENT with the flag and value first:
//   "--cases=abc: not an integer in [0, 2^40]"
//   "--dtype=f16: not f32|bf16"          (an enum's names come from its table)
//   "--frobnicate: unknown flag (see --help)"
//   "--layers needs a value"
//   "unexpected argument 'x'"           (positionals when none are taken)
#ifndef ATTNKIT_RUNTIME_FLAGS_H_
#define ATTNKIT_RUNTIME_FLAGS_H_

#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/enum_table.h"
#include "runtime/status.h"

namespace attnkit {

class FlagParser {
 public:
  // Parses a value. Returns "" when it is accepted (and stored), else why it
  // is not: the error then reads "<flag>=<value>: <why>".
  using Setter = std::function<std::string(std::string_view value)>;

  // `usage` is the synopsis after "usage: "; `description` (optional) the
  // paragraph between it and the flags.
  explicit FlagParser(std::string usage, std::string description = "");

  // Each registration names the flag with its dashes ("--seed", "-o") and
  // gives its --help line(s); `help` may hold '\n's.
  FlagParser& String(std::string name, std::string* target,
                     std::string value_name, std::string help);
  // Like String, but an empty value is an error ("<why_empty>").
  FlagParser& NonEmptyString(std::string name, std::string* target,
                             std::string value_name, std::string help,
                             std::string why_empty = "needs a file name");
  // Repeatable: every occurrence is appended. An empty value is an error
  // ("<why_empty>").
  FlagParser& Strings(std::string name, std::vector<std::string>* target,
                      std::string value_name, std::string help,
                      std::string why_empty = "needs a value");
  // An integer in [min, max] (runtime/parse.h: the whole value must be the
  // number).
  FlagParser& Int64(std::string name, int64_t* target, int64_t min, int64_t max,
                    std::string help, std::string value_name = "N");
  FlagParser& Uint64(std::string name, uint64_t* target, std::string help,
                     uint64_t max = UINT64_MAX, std::string value_name = "N");
  FlagParser& Bool(std::string name, bool* target, std::string help);
  // A number of seconds in (0, max].
  FlagParser& Seconds(std::string name, double* target, double max,
                      std::string help);
  // One of the table's names; --help shows them as the value ("f32|bf16").
  template <typename E, size_t N>
  FlagParser& Enum(std::string name, E* target, const EnumTable<E, N>& table,
                   std::string help) {
    return Custom(std::move(name), table.Names(), std::move(help),
                  [target, table](std::string_view v) -> std::string {
                    const auto e = table.Parse(v);
                    if (!e) return "not " + table.Names();
                    *target = *e;
                    return "";
                  });
  }
  // Any other value type: `set` parses, checks and stores it.
  FlagParser& Custom(std::string name, std::string value_name, std::string help,
                     Setter set);

  // Arguments that are not flags (and "-") go to *out, in order; without
  // this they are errors. The usage synopsis names them.
  FlagParser& Positional(std::vector<std::string>* out);
  // Flags that are not registered go to *out, verbatim and in order, instead
  // of being errors: for tools that hand the rest to another parser (Google
  // Benchmark's --benchmark_* flags). Their values must use `--name=value`.
  FlagParser& PassUnknown(std::vector<std::string>* out);
  // Text after the flags in --help (exit statuses, notes).
  FlagParser& Epilogue(std::string text);

  // Parses args (without the program name). Stops at the first error.
  Status Parse(std::span<char* const> args);
  Status Parse(int argc, char* const* argv) {
    return Parse(std::span<char* const>(argv, static_cast<size_t>(argc)));
  }

  // --help or -h was given.
  bool help() const { return help_; }
  // The flag was given at least once in the last Parse.
  bool Seen(std::string_view name) const;
  // "usage: ...", the description, one entry per flag, the epilogue.
  std::string Usage() const;

 private:
  struct Flag {
    std::string name;
    std::string value_name;  // empty: a boolean flag
    std::string help;
    Setter set;
  };
  FlagParser& Add(Flag f);
  const Flag* Find(std::string_view name) const;

  std::string usage_, description_, epilogue_;
  std::vector<Flag> flags_;
  std::vector<std::string>* positional_ = nullptr;
  std::vector<std::string>* unknown_ = nullptr;
  bool help_ = false;
  std::set<std::string, std::less<>> seen_;
};

// "[lo, hi]" with powers of two from 2^20 up written as 2^k: the range in
// an integer flag's error ("[0, 2^40]").
std::string IntegerRange(int64_t lo, int64_t hi);

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_FLAGS_H_
