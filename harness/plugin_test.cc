#include "harness/plugin.h"

#include <gtest/gtest.h>

#include "harness/runner.h"

namespace attnkit::harness {
namespace {

TEST(PluginTest, TheExamplePluginLoadsAndPassesCases) {
  auto b = LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "example");
  Backend* one[] = {b->get()};
  for (uint64_t i = 0; i < 40; ++i) {
    const TestCase c = GenerateCase(Tier::kSmoke, 2, i);
    auto r = RunCase(c, one);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ((*r)[0].outcome, Outcome::kPass)
        << c.ToString() << " " << (*r)[0].message;
  }
}

TEST(PluginTest, UnsupportedProblemsAreSkippedWithThePluginsReason) {
  auto b = LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_SMALL);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->name(), "example_small");
  Backend* one[] = {b->get()};
  auto c = ParseTestCase("seed=1,index=0,b=1,d=128,q=1,kv=3");
  ASSERT_TRUE(c.ok());
  auto r = RunCase(*c, one);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].outcome, Outcome::kSkipped);
  EXPECT_EQ((*r)[0].message,
            "UNIMPLEMENTED: plugin example_small: supports: head_dim=128 "
            "exceeds 64");
}

TEST(PluginTest, AMissingFileIsNotFound) {
  auto b = LoadPlugin("/nonexistent/libnothing.so");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(b.status().message(),
            "plugin=/nonexistent/libnothing.so: no such file");
}

TEST(PluginTest, AFileThatIsNotASharedLibraryIsRefused) {
  auto b = LoadPlugin(ATTNKIT_NOT_A_PLUGIN);  // a static archive
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("cannot load it as a shared library"),
            std::string::npos)
      << b.status().message();
}

TEST(PluginTest, ALibraryWithoutTheEntryPointIsRefused) {
  auto b = LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_NO_ENTRY);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("does not export attnkit_plugin_v1"),
            std::string::npos)
      << b.status().message();
}

TEST(PluginTest, AnotherAbiVersionIsRefused) {
  auto b = LoadPlugin(ATTNKIT_EXAMPLE_PLUGIN_BAD_ABI);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("abi_version=99, this attnkit speaks 1"),
            std::string::npos)
      << b.status().message();
}

}  // namespace
}  // namespace attnkit::harness
