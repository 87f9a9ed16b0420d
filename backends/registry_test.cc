#include "backends/registry.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace attnkit::backends {
namespace {

TEST(RegistryTest, EveryRegisteredBackendIsMadeUnderItsName) {
  ASSERT_FALSE(RegisteredBackends().empty());
  EXPECT_EQ(RegisteredBackends().front().name, "reference");
  for (const std::string& name : RegisteredBackendNames()) {
    auto b = MakeBackend(name);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ((*b)->name(), name);
  }
}

TEST(RegistryTest, UnknownNamesAreNotFoundAndListTheRegisteredOnes) {
  auto missing = MakeBackend("cuda");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("have: reference"),
            std::string::npos)
      << missing.status().ToString();
}

TEST(RegistryTest, TraitsComeFromTheListAndDefaultForOtherNames) {
  EXPECT_TRUE(TraitsOf("reference").quadratic_prefill);
  EXPECT_TRUE(TraitsOf("reference").baseline);
  const BackendTraits plugin = TraitsOf("some_plugin");
  EXPECT_FALSE(plugin.quadratic_prefill);
  EXPECT_FALSE(plugin.baseline);
  for (const BackendInfo& info : RegisteredBackends()) {
    if (info.name != "reference") {
      EXPECT_FALSE(info.traits.quadratic_prefill) << info.name;
      EXPECT_FALSE(info.traits.baseline) << info.name;
    }
  }
}

TEST(ResolveBackendsTest, EveryRegisteredBackendThenEachPlugin) {
  const std::vector<std::string> plugins{ATTNKIT_EXAMPLE_PLUGIN};
  auto set = ResolveBackends(plugins);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->size(), RegisteredBackends().size() + 1);
  EXPECT_EQ(set->front().name, "reference");
  EXPECT_TRUE(set->front().traits.quadratic_prefill);
  EXPECT_EQ(set->back().name, "example");
  EXPECT_FALSE(set->back().traits.quadratic_prefill);
  for (const BackendSource& s : *set) {
    auto b = s.make();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ((*b)->name(), s.name);
  }
}

TEST(ResolveBackendsTest, SelectionKeepsItsOrder) {
  const std::vector<std::string> plugins{ATTNKIT_EXAMPLE_PLUGIN};
  auto set = ResolveBackends(plugins,
                             std::vector<std::string>{"example", "reference"});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->size(), 2u);
  EXPECT_EQ((*set)[0].name, "example");
  EXPECT_EQ((*set)[1].name, "reference");
}

// `--backends plugins`: a project checking its own kernels only.
TEST(ResolveBackendsTest, PluginsSelectsEveryPluginOnly) {
  const std::vector<std::string> plugins{ATTNKIT_EXAMPLE_PLUGIN};
  auto set = ResolveBackends(
      plugins, std::vector<std::string>{std::string(kEveryPlugin)});
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  ASSERT_EQ(set->size(), 1u);
  EXPECT_EQ((*set)[0].name, "example");
  auto none =
      ResolveBackends({}, std::vector<std::string>{std::string(kEveryPlugin)});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("none was given"), std::string::npos)
      << none.status().message();
}

TEST(ResolveBackendsTest, ErrorsNameThePathOrTheName) {
  auto none = ResolveBackends({}, std::vector<std::string>{"nosuch"});
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("no backend 'nosuch' (have: "
                                         "reference"),
            std::string::npos)
      << none.status().ToString();
  const std::vector<std::string> missing{"/nonexistent/libx.so"};
  auto bad = ResolveBackends(missing);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/nonexistent/libx.so"),
            std::string::npos)
      << bad.status().ToString();
  const std::vector<std::string> twice{ATTNKIT_EXAMPLE_PLUGIN,
                                       ATTNKIT_EXAMPLE_PLUGIN};
  auto dup = ResolveBackends(twice);
  EXPECT_EQ(dup.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.status().message().find("'example' is already in the list"),
            std::string::npos)
      << dup.status().ToString();
  auto twice_selected =
      ResolveBackends({}, std::vector<std::string>{"reference", "reference"});
  EXPECT_EQ(twice_selected.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnkit::backends
