#include "runtime/report_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace attnkit {
namespace {

namespace fs = std::filesystem;

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ReportFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("report_file_test." + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Every file in the directory (a leftover temporary shows up here).
  size_t Files() const {
    return static_cast<size_t>(
        std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }
  fs::path dir_;
};

TEST_F(ReportFileTest, OpenRemovesTheOldReportAndCommitPublishesTheNewOne) {
  const fs::path p = dir_ / "r.json";
  std::ofstream(p) << "last run's results";
  auto f = ReportFile::Open(p.string(), "--json");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_FALSE(fs::exists(p)) << "a stale report survived Open";
  ASSERT_TRUE(f->Commit("{\"new\": 1}\n").ok());
  EXPECT_EQ(Read(p), "{\"new\": 1}\n");
  EXPECT_EQ(Files(), 1u);
  const Status again = f->Commit("x");
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
}

TEST_F(ReportFileTest, AnAbandonedReportLeavesNothing) {
  const fs::path p = dir_ / "r.json";
  std::ofstream(p) << "stale";
  {
    auto f = ReportFile::Open(p.string(), "--json");
    ASSERT_TRUE(f.ok());
  }
  EXPECT_EQ(Files(), 0u);
}

TEST_F(ReportFileTest, AnUnwritablePathIsFoundAtOpenNamingFlagAndPath) {
  const std::string p = (dir_ / "no_such_dir" / "r.json").string();
  auto f = ReportFile::Open(p, "--junit");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("--junit=" + p + ": cannot create"),
            std::string::npos)
      << f.status().ToString();
  auto d = ReportFile::Open(dir_.string(), "--json");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("is a directory"), std::string::npos);
  EXPECT_FALSE(ReportFile::Open("", "--json").ok());
}

// A device is written in place (a rename would replace it), every write
// checked: /dev/full's ENOSPC is an error, not a silent success.
TEST_F(ReportFileTest, AFullDeviceIsAnErrorAndAnotherDeviceIsWrittenInPlace) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  auto full = ReportFile::Open("/dev/full", "--json");
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  const Status s = full->Commit("{}\n");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--json=/dev/full: cannot write"),
            std::string::npos)
      << s.ToString();
  EXPECT_TRUE(fs::is_character_file("/dev/full"));

  auto null = ReportFile::Open("/dev/null", "--json");
  ASSERT_TRUE(null.ok());
  EXPECT_TRUE(null->Commit("{}\n").ok());
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

}  // namespace
}  // namespace attnkit
