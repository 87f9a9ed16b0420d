// Renders the dashboard in headless Chromium (Debian `chromium`, which
// ./attnkit installs) and checks from the laid-out DOM that every plot was
// drawn; keeps a screenshot as a test artifact
// ($ATTNKIT_RENDER_ARTIFACT_DIR/dashboard_render.png, the build dir's bench/).
// Chromium missing is a failure, not a skip: CI installs it, so its absence
// means a broken install.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "bench/dashboard.h"
#include "bench/testing_runs.h"

namespace attnkit::bench {
namespace {

namespace fs = std::filesystem;

std::string FindChromium() {
  if (const char* c = std::getenv("ATTNKIT_CHROMIUM"); c && *c) return c;
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser",
                        "/usr/bin/google-chrome"}) {
    if (access(c, X_OK) == 0) return c;
  }
  return "";
}

std::string Shell(const std::string& cmd, int* status) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  *status = pclose(f);
  return out;
}

TEST(DashboardRenderTest, ChromiumDrawsEveryPlot) {
  const std::string chromium = FindChromium();
  ASSERT_FALSE(chromium.empty())
      << "chromium not found (./attnkit installs the Debian package "
         "'chromium'; or set ATTNKIT_CHROMIUM)";
  const char* art = std::getenv("ATTNKIT_RENDER_ARTIFACT_DIR");
  const fs::path out_dir =
      art != nullptr && *art ? fs::path(art) : fs::temp_directory_path();
  const fs::path tmp = fs::temp_directory_path() /
                       ("attnkit_render_" + std::to_string(getpid()));
  fs::create_directories(tmp / "profile");

  testing::Plant plant;
  plant.slowdown["prefill/reference/S:2048/d:128/causal:1/hkv:8/real_time"] =
      1.3;
  plant.extra_alloc["decode_step/reference/len:512/inplace:1/real_time"] = 1;
  std::vector<RunData> runs;
  for (int i = 0; i < 6; ++i) {
    runs.push_back(testing::SyntheticRun(std::to_string(1000 + i) + "abcdef",
                                         "2026-01-0" + std::to_string(i + 1),
                                         static_cast<uint64_t>(i), 9,
                                         i == 4 ? plant : testing::Plant{}));
    // Decode bandwidth in every run, the same-run read_bw in all but run 3
    // (filtered out): the pct_read_bw_same_run plot has a gap.
    testing::SetBandwidthContext(runs.back(), 2, 52);
    testing::SetDecodeBandwidth(runs.back(), testing::kSyntheticDecode,
                                {9.5 + i, 10, 10.5}, 52);
    if (i != 3) testing::AddReadBandwidth(runs.back(), 2, {30.0 + 5 * i, 40});
  }
  const fs::path html = out_dir / "dashboard_render.html";
  {
    std::ofstream f(html);
    f << RenderDashboard(runs);
  }
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-quic --no-first-run "
      "--disable-background-networking --disable-component-update "
      "--disable-sync --user-data-dir=" +
      (tmp / "profile").string() + " --virtual-time-budget=5000 ";
  int status = 0;
  const std::string dom = Shell(
      chromium + flags + "--dump-dom file://" + html.string() + " 2>/dev/null",
      &status);
  ASSERT_EQ(status, 0) << "chromium --dump-dom failed";
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      dom, m,
      std::regex("data-plots-total=\"(\\d+)\" data-plots-drawn=\"(\\d+)\"")))
      << "the page's script did not run; DOM starts: " << dom.substr(0, 400);
  // 5 benchmarks x (time, GFLOPS) + 2 decode_step x (allocs, bytes) + decode
  // (GBps, pct_peak, pct_read_bw_same_run) + read_bw (time, GBps).
  EXPECT_EQ(std::stoi(m[1]), 19);
  EXPECT_EQ(std::stoi(m[2]), 19) << "plots laid out with an empty series";
  EXPECT_NE(dom.find("19 of 19 plots drawn"), std::string::npos);
  EXPECT_NE(dom.find("<table id=\"decode-bw\">"), std::string::npos);
  EXPECT_NE(dom.find("pt regression"), std::string::npos);

  const fs::path png = out_dir / "dashboard_render.png";
  fs::remove(png);
  Shell(chromium + flags + "--window-size=1400,1800 --screenshot=" +
            png.string() + " file://" + html.string() + " 2>/dev/null",
        &status);
  ASSERT_EQ(status, 0) << "chromium --screenshot failed";
  ASSERT_TRUE(fs::exists(png));
  std::ifstream f(png, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  EXPECT_EQ(std::string(sig, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  // A blank 1400x1800 page compresses to a few kB; plots and text do not.
  EXPECT_GT(fs::file_size(png), 30000u);
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace attnkit::bench
