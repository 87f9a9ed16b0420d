// Built after every backend (see the root CMakeLists.txt): it is the only
// place that knows them all.
#include <memory>

#include "runtime/backend.h"

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

namespace {
#define ATTNKIT_BACKEND(name, factory) BackendInfo{#name, &factory},
constexpr BackendInfo kBackends[] = {
#include "runtime/backends.inc"
};
#undef ATTNKIT_BACKEND
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
  std::string known;
  for (const BackendInfo& b : kBackends) {
    if (!known.empty()) known += ", ";
    known += b.name;
  }
  return Status::NotFound("backend=" + std::string(name) +
                          " is not registered (have: " + known + ")");
}

}  // namespace attnkit
