#include "bench/history.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "bench/testing_runs.h"

namespace attnkit::bench {
namespace {

class HistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("attnkit_history_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    path_ = (dir_ / "sub" / "history.sqlite").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(HistoryTest, IngestLoadAndListInIngestionOrder) {
  auto store = HistoryStore::Open(path_);  // creates sub/
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  testing::Plant plant;
  plant.error["prefill/reference/S:128/d:64/causal:0/hkv:8/real_time"] =
      "output mismatch";
  // Ingested out of date order on purpose: listed as ingested.
  const RunData later =
      testing::SyntheticRun("bbbb2222", "2026-02-01T00:00:00", 2, 9, plant);
  const RunData earlier =
      testing::SyntheticRun("aaaa1111", "2026-01-01T00:00:00", 1);
  auto id_later = store->Ingest(later);
  auto id_earlier = store->Ingest(earlier);
  ASSERT_TRUE(id_later.ok() && id_earlier.ok());
  EXPECT_NE(*id_later, *id_earlier);
  // Ingesting the same run again is a no-op returning its id.
  auto again = store->Ingest(later);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *id_later);

  auto runs = store->ListRuns();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[0].sha, "bbbb2222");
  EXPECT_EQ((*runs)[1].sha, "aaaa1111");

  auto loaded = store->LoadRun(*id_later);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->info.host, "testhost");
  ASSERT_EQ(loaded->benchmarks.size(), later.benchmarks.size());
  for (const auto& [name, s] : later.benchmarks) {
    // Every repetition, in order, bit for bit.
    EXPECT_EQ(loaded->benchmarks.at(name).metrics, s.metrics) << name;
    EXPECT_EQ(loaded->benchmarks.at(name).error, s.error) << name;
  }
}

TEST_F(HistoryTest, PersistsAcrossOpens) {
  {
    auto store = HistoryStore::Open(path_);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE(
        store->Ingest(testing::SyntheticRun("cafe", "2026-01-01", 1)).ok());
  }
  auto store = HistoryStore::Open(path_);
  ASSERT_TRUE(store.ok());
  auto runs = store->ListRuns();
  ASSERT_TRUE(runs.ok());
  EXPECT_EQ(runs->size(), 1u);
}

TEST_F(HistoryTest, ResolvesSpecs) {
  auto store = HistoryStore::Open(path_);
  ASSERT_TRUE(store.ok());
  auto a = store->Ingest(testing::SyntheticRun("0123abcd", "2026-01-01", 1));
  auto b = store->Ingest(testing::SyntheticRun("0123ffff", "2026-01-02", 2));
  auto c = store->Ingest(testing::SyntheticRun("0123abcd", "2026-01-03", 3));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto id_of = [&](std::string_view spec) -> int64_t {
    auto r = store->Resolve(spec);
    EXPECT_TRUE(r.ok()) << spec << ": " << r.status().ToString();
    return r.ok() ? r->info.id : -1;
  };
  EXPECT_EQ(id_of("latest"), *c);
  EXPECT_EQ(id_of("latest~1"), *b);
  EXPECT_EQ(id_of("latest~2"), *a);
  EXPECT_EQ(id_of(std::to_string(*b)), *b);
  EXPECT_EQ(id_of("0123abcd"), *c);  // a commit's newest run
  EXPECT_EQ(id_of("0123f"), *b);

  auto r = store->Resolve("latest~3");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("holds 3 runs"), std::string::npos);
  r = store->Resolve("latest~x");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  r = store->Resolve("beef");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("'beef'"), std::string::npos);
  r = store->Resolve("main");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'main'"), std::string::npos);
}

// Issue 16: `latest` was the largest date string, so one run dated in the
// future (a wrong clock, a hand-made file) became `latest` forever and
// inverted `compare latest~1 latest`. It is the run ingested last.
TEST_F(HistoryTest, LatestIsTheRunIngestedLastWhateverItsDate) {
  auto store = HistoryStore::Open(path_);
  ASSERT_TRUE(store.ok());
  auto future =
      store->Ingest(testing::SyntheticRun("aaaa9999", "2099-01-01", 1));
  auto today =
      store->Ingest(testing::SyntheticRun("bbbb2026", "2026-11-21", 2));
  ASSERT_TRUE(future.ok() && today.ok());
  auto latest = store->Resolve("latest");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  EXPECT_EQ(latest->info.id, *today);
  auto before = store->Resolve("latest~1");
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->info.id, *future);
}

// `latest~99999999999999999999` threw std::out_of_range from std::stoll and
// aborted; a 20-digit id was cut to 18 digits and could name another run.
TEST_F(HistoryTest, SpecNumbersOutOfRangeAreStatusesNamingTheValue) {
  auto store = HistoryStore::Open(path_);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(store->Ingest(testing::SyntheticRun("0123abcd", "d1", 1)).ok());
  ASSERT_TRUE(store->Ingest(testing::SyntheticRun("0123ffff", "d2", 2)).ok());
  for (const char* n : {"99999999999999999999", "-1", "", "1x", " 1", "+1"}) {
    const std::string spec = std::string("latest~") + n;
    auto r = store->Resolve(spec);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << spec;
    EXPECT_NE(r.status().message().find("N='" + std::string(n) + "'"),
              std::string::npos)
        << r.status().ToString();
  }
  auto r = store->Resolve("latest~2");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("holds 2 runs (latest~0 to latest~1)"),
            std::string::npos)
      << r.status().ToString();
  r = store->Resolve("latest~9223372036854775807");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  // Not the run whose id is the first 18 digits, not a crash.
  r = store->Resolve("100000000000000000001");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("'100000000000000000001'"),
            std::string::npos);
}

// `ingest a b` stored a when b failed. IngestAll is one transaction: a
// failure in the second run (here: a trigger refusing it) stores nothing.
TEST_F(HistoryTest, IngestAllStoresNothingWhenOneRunFails) {
  auto store = HistoryStore::Open(path_);
  ASSERT_TRUE(store.ok());
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TRIGGER refuse BEFORE INSERT ON samples "
                           "WHEN (SELECT sha FROM runs WHERE id = "
                           "NEW.run_id) = 'bad00000' BEGIN SELECT "
                           "RAISE(ABORT, 'refused by test'); END;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  RunData good = testing::SyntheticRun("900d0000", "d1", 1);
  RunData bad = testing::SyntheticRun("bad00000", "d2", 2);
  auto ids = store->IngestAll({good, bad});
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("nothing stored"), std::string::npos);
  EXPECT_NE(ids.status().message().find("synthetic-bad00000"),
            std::string::npos)
      << ids.status().ToString();
  EXPECT_NE(ids.status().message().find("refused by test"), std::string::npos);
  auto runs = store->ListRuns();
  ASSERT_TRUE(runs.ok());
  EXPECT_TRUE(runs->empty());
  // Without the bad run both are stored, in order.
  ids = store->IngestAll({good, testing::SyntheticRun("900d0001", "d0", 3)});
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_EQ(ids->size(), 2u);
  EXPECT_LT((*ids)[0], (*ids)[1]);
  auto latest = store->Resolve("latest");
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(latest->info.sha, "900d0001");
}

TEST_F(HistoryTest, OpenReportsUnusablePaths) {
  auto s = HistoryStore::Open("");
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  // A directory where the database file should be.
  std::filesystem::create_directories(dir_ / "isdir");
  s = HistoryStore::Open((dir_ / "isdir").string());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("isdir"), std::string::npos);
}

}  // namespace
}  // namespace attnkit::bench
