#include "backends/registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "plugin/loader.h"

namespace attnkit {
namespace reference {
std::unique_ptr<Backend> MakeReferenceBackend();
}
namespace simd {
std::unique_ptr<Backend> MakeSimdBackend();
}
namespace compiled {
std::unique_ptr<Backend> MakeCompiledBackend();
}

namespace backends {
namespace {
#define ATTNKIT_BACKEND(name, factory, traits) \
  BackendInfo{#name, &factory, traits},
constexpr BackendInfo kBackends[] = {
#include "backends/backends.inc"
};
#undef ATTNKIT_BACKEND

std::string Join(const std::vector<std::string>& names, std::string_view sep) {
  std::string out;
  for (const std::string& n : names) {
    if (!out.empty()) out += sep;
    out += n;
  }
  return out;
}
}  // namespace

std::span<const BackendInfo> RegisteredBackends() { return kBackends; }

std::vector<std::string> RegisteredBackendNames() {
  std::vector<std::string> names;
  for (const BackendInfo& b : kBackends) names.emplace_back(b.name);
  return names;
}

StatusOr<std::unique_ptr<Backend>> MakeBackend(std::string_view name) {
  for (const BackendInfo& b : kBackends) {
    if (b.name == name) return b.make();
  }
  return Status::NotFound("backend=" + std::string(name) +
                          " is not registered (have: " +
                          Join(RegisteredBackendNames(), ", ") + ")");
}

BackendTraits TraitsOf(std::string_view name) {
  for (const BackendInfo& b : kBackends) {
    if (b.name == name) return b.traits;
  }
  return {};
}

void AddIsolationFlags(FlagParser& p, ResolveOptions* o) {
  p.Enum("--isolate", &o->isolation, kIsolationNames,
         "where backends run: plugins = plug-ins in a worker process\n"
         "(default), process = every backend in a worker, none = all in\n"
         "this process (a crashing kernel then ends the run)")
      .Seconds("--case-timeout", &o->remote.call_timeout_s, 1e6,
               "deadline of each call to an isolated backend (default:\n"
               "10 s plus the call's FLOPs at 0.1 GFLOP/s); past it the\n"
               "worker is killed and the call is a timeout")
      .Bool("--no-kernel-cache", &o->no_kernel_cache,
            "compile every kernel of the compiled backend in this run,\n"
            "neither loading nor storing the on-disk kernel cache\n"
            "(default: $ATTNKIT_KERNEL_CACHE, else\n"
            "$XDG_CACHE_HOME/attnkit/kernels; ATTNKIT_KERNEL_CACHE=off\n"
            "disables it too)");
}

std::string IsolationFlagsGiven(const FlagParser& p, const ResolveOptions& o) {
  std::string s;
  if (p.Seen("--isolate")) {
    s += "--isolate " + std::string(kIsolationNames.Name(o.isolation));
  }
  if (p.Seen("--case-timeout")) {
    char t[48];
    std::snprintf(t, sizeof(t), "%s--case-timeout %g", s.empty() ? "" : " ",
                  o.remote.call_timeout_s);
    s += t;
  }
  return s;
}

namespace {

StatusOr<std::unique_ptr<Backend>> StartRemote(const WorkerSpec& spec,
                                               const RemoteOptions& o) {
  ATTNKIT_ASSIGN_OR_RETURN(std::unique_ptr<RemoteBackend> r,
                           RemoteBackend::Start(spec, o));
  return std::unique_ptr<Backend>(std::move(r));
}

}  // namespace

StatusOr<std::vector<BackendSource>> ResolveBackends(
    std::span<const std::string> plugin_paths,
    const std::optional<std::vector<std::string>>& select,
    const ResolveOptions& options) {
  if (options.no_kernel_cache) {
    // Before any backend exists: the compiled backend's kernel cache reads
    // it when first used, and worker processes inherit it.
    setenv("ATTNKIT_KERNEL_CACHE", "off", 1);
  }
  const bool builtins_apart = options.isolation == Isolation::kProcess;
  const bool plugins_apart = options.isolation != Isolation::kNone;
  const RemoteOptions remote = options.remote;
  std::vector<BackendSource> all;
  for (const BackendInfo& info : kBackends) {
    if (builtins_apart) {
      all.push_back({std::string(info.name), info.traits,
                     [spec = WorkerSpec{std::string(info.name), ""}, remote] {
                       return StartRemote(spec, remote);
                     }});
      continue;
    }
    all.push_back({std::string(info.name), info.traits,
                   [make = info.make]() -> StatusOr<std::unique_ptr<Backend>> {
                     return make();
                   }});
  }
  for (const std::string& path : plugin_paths) {
    std::unique_ptr<Backend> p;
    if (plugins_apart) {
      ATTNKIT_ASSIGN_OR_RETURN(p, StartRemote({"", path}, remote));
    } else {
      ATTNKIT_ASSIGN_OR_RETURN(p, plugin::LoadPlugin(path));
    }
    std::string name(p->name());
    for (const BackendSource& b : all) {
      if (b.name == name) {
        return Status::InvalidArgument("plugin=" + path + ": backend '" + name +
                                       "' is already in the list");
      }
    }
    if (plugins_apart) {
      all.push_back({std::move(name), BackendTraits{},
                     [spec = WorkerSpec{"", path}, remote] {
                       return StartRemote(spec, remote);
                     }});
    } else {
      all.push_back({std::move(name), BackendTraits{},
                     [path] { return plugin::LoadPlugin(path); }});
    }
  }
  if (!select) return all;
  std::vector<BackendSource> chosen;
  for (const std::string& name : *select) {
    if (name == kEveryPlugin) {  // every --plugin's backend, in order
      if (plugin_paths.empty()) {
        return Status::InvalidArgument(
            "'plugins' selects the --plugin backends, and none was given");
      }
      for (size_t i = std::size(kBackends); i < all.size(); ++i) {
        chosen.push_back(all[i]);
      }
      continue;
    }
    auto it = std::find_if(all.begin(), all.end(), [&](const BackendSource& b) {
      return b.name == name;
    });
    if (it == all.end()) {
      std::vector<std::string> have;
      for (const BackendSource& b : all) have.push_back(b.name);
      return Status::NotFound("no backend '" + name + "' (have: " +
                              Join(have, ", ") + "; plug-ins need --plugin)");
    }
    for (const BackendSource& b : chosen) {
      if (b.name == name) {
        return Status::InvalidArgument("backend '" + name +
                                       "' is already in the list");
      }
    }
    chosen.push_back(*it);
  }
  return chosen;
}

}  // namespace backends
}  // namespace attnkit
