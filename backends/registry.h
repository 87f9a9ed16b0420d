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

#include "runtime/backend.h"
#include "runtime/status.h"

namespace attnkit::backends {

// What a tool may assume about a backend's arithmetic and cost. A plug-in's
// traits are the defaults: nothing assumed.
struct BackendTraits {
  // Prefill materializes the S x S logits per head: memory and time grow
  // with S^2, so benchmarks cap its sequence length.
  bool quadratic_prefill = false;
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

// The backends a tool runs: every registered one, then one per plug-in path
// (plugin/loader.h; loaded once here, so a bad library is reported before
// anything runs), narrowed to `select` by name and in its order when given.
// Errors name the bad path or name: a plug-in that does not load, a plug-in
// whose name is taken, a selected name that none has (listing what there
// is), a name selected twice.
StatusOr<std::vector<BackendSource>> ResolveBackends(
    std::span<const std::string> plugin_paths,
    const std::optional<std::vector<std::string>>& select = std::nullopt);

}  // namespace attnkit::backends

#endif  // ATTNKIT_BACKENDS_REGISTRY_H_
