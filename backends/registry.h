// The one registry: every backend this build has (backends/backends.inc),
// with the traits tools read instead of names, and the resolution of the
// backends a tool runs -- registered ones and plug-ins (--plugin lib.so)
// alike -- so check, decode and bench see plug-ins one way.
#ifndef ATTNKIT_BACKENDS_REGISTRY_H_
#define ATTNKIT_BACKENDS_REGISTRY_H_

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/remote.h"
#include "runtime/backend.h"
#include "runtime/enum_table.h"
#include "runtime/flags.h"
#include "runtime/status.h"

namespace attnkit::backends {

// What a tool may assume about a backend's arithmetic and cost. A plug-in's
// traits are the defaults: nothing assumed.
struct BackendTraits {
  // Prefill materializes the S x S logits per head: memory and time grow
  // with S^2, so benchmarks cap its sequence length.
  bool quadratic_prefill = false;
  // The naive, unfused baseline (the reference): benchmarks time it for the
  // speedups over it, never against the machine's limits, so it gets no
  // paired twin (decode_paired*/, prefill*_paired/: % of the read bandwidth
  // or FMA peak measured alongside -- a figure for fast kernels).
  bool baseline = false;
};

using BackendFactory = std::unique_ptr<Backend> (*)();

struct BackendInfo {
  std::string_view name;
  BackendFactory make;
  BackendTraits traits;
};

// Every backend this build has, in backends.inc order.
std::span<const BackendInfo> RegisteredBackends();
std::vector<std::string> RegisteredBackendNames();
// NOT_FOUND lists the registered names.
StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view name);
// The registered backend's traits; the defaults for any other name (a
// plug-in).
BackendTraits TraitsOf(std::string_view name);

// A backend a tool runs: its name, its traits and how to make an instance
// (check makes one; the decode report one per session).
struct BackendSource {
  std::string name;
  BackendTraits traits;
  std::function<StatusOr<std::unique_ptr<Backend>>()> make;
};

// Where a backend's calls run (backends/remote.h):
//   kPlugins : plug-ins in a worker process, registered backends here (the
//              default: the gate survives the kernels users bring);
//   kProcess : every backend in a worker of its own;
//   kNone    : everything in this process (benchmarks: no round trip in
//              the timings; a crash takes the tool with it).
enum class Isolation : uint8_t { kPlugins = 0, kProcess, kNone };
inline constexpr auto kIsolationNames = MakeEnumTable<Isolation>({
    {Isolation::kPlugins, "plugins"},
    {Isolation::kProcess, "process"},
    {Isolation::kNone, "none"},
});
static_assert(kIsolationNames.RoundTrips());

struct ResolveOptions {
  Isolation isolation = Isolation::kPlugins;
  RemoteOptions remote;  // for the isolated ones
  // The compiled backend compiles every kernel, neither loading nor storing
  // the on-disk kernel cache (ResolveBackends sets ATTNKIT_KERNEL_CACHE=off,
  // which the worker processes inherit).
  bool no_kernel_cache = false;
};

// --isolate plugins|process|none, --case-timeout SECONDS and
// --no-kernel-cache, for the tools that run backends (check, decode).
void AddIsolationFlags(FlagParser& p, ResolveOptions* o);
// Those of them given in the last parse, as flags to repeat in a
// reproducer ("" when none).
std::string IsolationFlagsGiven(const FlagParser& p, const ResolveOptions& o);

// In a selection: every plug-in's backend (`--backends plugins`: a
// project checking its own kernels, not attnkit's).
inline constexpr std::string_view kEveryPlugin = "plugins";

// The backends a tool runs: every registered one, then one per plug-in path
// (plugin/loader.h; loaded once here -- in a worker when isolated -- so a
// bad library is reported before anything runs), narrowed to `select` by
// name (or kEveryPlugin) and in its order when given. Isolated sources make
// RemoteBackends. Errors name the bad path or name: a plug-in that does not
// load, a plug-in whose name is taken, a selected name that none has (listing
// what there is), a name selected twice.
StatusOr<std::vector<BackendSource>> ResolveBackends(
    std::span<const std::string> plugin_paths,
    const std::optional<std::vector<std::string>>& select = std::nullopt,
    const ResolveOptions& options = {});

}  // namespace attnkit::backends

#endif  // ATTNKIT_BACKENDS_REGISTRY_H_
