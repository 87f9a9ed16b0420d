#include "bench/ab.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "bench/compare.h"
#include "bench/decode_bandwidth.h"
#include "bench/prefill_paired.h"
#include "runtime/stats.h"

extern char** environ;

namespace attnkit::bench {

namespace {

double MedianOf(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(),
                         [](double x) { return std::isnan(x); }),
          v.end());
  return v.empty() ? NAN : Median(v);
}

std::string Fmt(const char* fmt, double x) {
  if (std::isnan(x)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}

const char* VerdictName(AbVerdict v) {
  switch (v) {
    case AbVerdict::kFaster:
      return "faster";
    case AbVerdict::kSame:
      return "~";
    case AbVerdict::kSlower:
      return "SLOWER";
    case AbVerdict::kUndecided:
      return "UNDECIDED";
    case AbVerdict::kFailed:
      return "FAILED";
  }
  return "?";
}

std::string CommandText(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

}  // namespace

AbRowSummary SummarizeAbRow(const AbRow& row, double threshold) {
  AbRowSummary s;
  std::vector<double> ratios, base_limit, new_limit;
  double base_best = INFINITY, new_best = INFINITY;
  for (const AbRound& r : row.rounds) {
    if (r.base_ns > 0 && r.new_ns > 0) {
      ratios.push_back(r.new_ns / r.base_ns);
      base_best = std::min(base_best, r.base_ns);
      new_best = std::min(new_best, r.new_ns);
    }
    base_limit.push_back(r.base_limit);
    new_limit.push_back(r.new_limit);
  }
  s.base_limit = MedianOf(base_limit);
  s.new_limit = MedianOf(new_limit);
  if (ratios.empty()) return s;
  std::sort(ratios.begin(), ratios.end());
  const size_t q = ratios.size() / 4;
  s.ratio = Median(ratios);
  s.best_ratio = new_best / base_best;
  s.q1 = ratios[q];
  s.q3 = ratios[ratios.size() - 1 - q];
  if (!row.error.empty()) return s;
  int slower = 0, faster = 0;
  for (double r : ratios) {
    slower += r > 1;
    faster += r < 1;
  }
  s.slower_rounds = slower;
  s.timed_rounds = static_cast<int>(ratios.size());
  s.p_slower = SignTestP(slower, slower + faster);
  s.p_faster = SignTestP(faster, slower + faster);
  if (s.ratio >= 1 + threshold && s.p_slower <= kAbSignificance) {
    s.verdict = AbVerdict::kSlower;
  } else if (s.ratio >= 1 + threshold &&
             SignTestP(slower + faster, slower + faster) > kAbSignificance) {
    s.verdict = AbVerdict::kUndecided;  // even all rounds could not resolve
  } else if (s.ratio <= 1 / (1 + threshold) && s.p_faster <= kAbSignificance) {
    s.verdict = AbVerdict::kFaster;
  } else {
    s.verdict = AbVerdict::kSame;
  }
  return s;
}

double SignTestP(int k, int n) {
  // P(X >= k), X ~ Binomial(n, 1/2), summed exactly.
  if (n <= 0) return 1.0;
  double p = 0, c = 1;  // c = C(n, i)
  for (int i = 0; i <= n; ++i) {
    if (i >= k) p += c;
    c = c * (n - i) / (i + 1);
  }
  return p / std::pow(2.0, n);
}

std::string ExactNameFilter(std::string_view name) {
  std::string f = "^";
  for (char c : name) {
    if (std::strchr(".^$|()[]{}*+?\\", c) != nullptr) f += '\\';
    f += c;
  }
  return f + "$";
}

double LimitOf(const BenchmarkSamples& s) {
  for (std::string_view m :
       {kPctReadBwPaired, kPctFmaPaired, std::string_view("pct_peak")}) {
    if (const std::vector<double>* v = FindMetric(s, m)) return MedianOf(*v);
  }
  return NAN;
}

std::string FormatAbTable(const std::vector<AbRow>& rows, double threshold,
                          const std::string& base_label,
                          const std::string& new_label) {
  std::string out =
      "A/B, time NEW / BASE per round (median [quartiles]), NEW's fastest "
      "round / BASE's (best), rounds NEW was slower in; % of the limit "
      "measured in the same process (pct_peak, or the paired figure: "
      "pct_read_bw_paired for decode_paired/, pct_fma_paired for "
      "prefill_paired/)\n";
  out += "  BASE " + base_label + "\n  NEW  " + new_label + "\n";
  size_t width = 9;
  for (const AbRow& r : rows) width = std::max(width, r.name.size());
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-*s %6s %13s %6s %6s %9s %15s\n",
                static_cast<int>(width), "benchmark", "ratio", "[q1-q3]",
                "best", "slower", "verdict", "limit% B -> N");
  out += buf;
  std::map<AbVerdict, int> counts;
  for (const AbRow& r : rows) {
    const AbRowSummary s = SummarizeAbRow(r, threshold);
    ++counts[s.verdict];
    const std::string quart =
        "[" + Fmt("%.2f", s.q1) + "-" + Fmt("%.2f", s.q3) + "]";
    const std::string slower =
        std::to_string(s.slower_rounds) + "/" + std::to_string(s.timed_rounds);
    const std::string limits =
        Fmt("%.1f", s.base_limit) + " -> " + Fmt("%.1f", s.new_limit);
    std::snprintf(buf, sizeof buf, "%-*s %6s %13s %6s %6s %9s %15s\n",
                  static_cast<int>(width), r.name.c_str(),
                  Fmt("%.3f", s.ratio).c_str(), quart.c_str(),
                  Fmt("%.3f", s.best_ratio).c_str(), slower.c_str(),
                  VerdictName(s.verdict), limits.c_str());
    out += buf;
    if (!r.error.empty()) out += "    error: " + r.error + "\n";
  }
  std::snprintf(buf, sizeof buf,
                "%zu benchmarks, %zu rounds: %d faster, %d same, %d slower, "
                "%d undecided, %d failed (threshold %.0f%%)\n",
                rows.size(), rows.empty() ? size_t{0} : rows[0].rounds.size(),
                counts[AbVerdict::kFaster], counts[AbVerdict::kSame],
                counts[AbVerdict::kSlower], counts[AbVerdict::kUndecided],
                counts[AbVerdict::kFailed], threshold * 100);
  out += buf;
  return out;
}

int AbExitStatus(const std::vector<AbRow>& rows, double threshold) {
  if (rows.empty()) return 1;  // nothing compared is not a pass
  for (const AbRow& r : rows) {
    const AbVerdict v = SummarizeAbRow(r, threshold).verdict;
    if (v == AbVerdict::kSlower || v == AbVerdict::kUndecided ||
        v == AbVerdict::kFailed) {
      return 1;
    }
  }
  return 0;
}

StatusOr<std::string> RunCapture(const std::vector<std::string>& argv,
                                 std::string* err) {
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    return Status::Internal("pipe: " + std::string(std::strerror(errno)));
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    return Status::Internal("pipe: " + std::string(std::strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc =
      posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    return Status::InvalidArgument("cannot run " + argv[0] + ": " +
                                   std::strerror(rc));
  }
  std::string out, errors;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&out, &errors};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (pollfd& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (err != nullptr) *err = errors;
  if (WIFSIGNALED(status)) {
    return Status::Internal(CommandText(argv) + ": killed by signal " +
                            std::to_string(WTERMSIG(status)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string tail =
        errors.size() > 400 ? errors.substr(errors.size() - 400) : errors;
    return Status::Internal(CommandText(argv) + ": exit status " +
                            std::to_string(WEXITSTATUS(status)) +
                            (tail.empty() ? "" : "; stderr: " + tail));
  }
  return out;
}

StatusOr<std::vector<std::string>> ListBenchmarks(const std::string& bin,
                                                  const std::string& filter) {
  std::vector<std::string> argv{bin, "--benchmark_list_tests=true"};
  if (!filter.empty()) argv.push_back("--benchmark_filter=" + filter);
  ATTNKIT_ASSIGN_OR_RETURN(std::string text, RunCapture(argv));
  std::vector<std::string> names;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) {
      line.pop_back();
    }
    if (!line.empty()) names.push_back(line);
    at = end + 1;
  }
  return names;
}

namespace {

// One run of one benchmark: its time per iteration and % of limit, or the
// error that fails the row.
struct OneRun {
  double ns = NAN, limit = NAN;
  std::string error;
  RunInfo info;  // the run's context (MethodMismatch)
};

OneRun RunOne(const std::string& bin, const std::string& name,
              double min_time) {
  OneRun r;
  char mt[32];
  std::snprintf(mt, sizeof mt, "%g", min_time);
  auto out = RunCapture({bin, "--benchmark_filter=" + ExactNameFilter(name),
                         std::string("--benchmark_min_time=") + mt,
                         "--benchmark_format=json"});
  if (!out.ok()) {
    r.error = out.status().message();
    return r;
  }
  auto run = ParseGoogleBenchmarkJson(*out, bin);
  if (!run.ok()) {
    r.error = bin + ": " + run.status().message();
    return r;
  }
  auto it = run->benchmarks.find(name);
  if (it == run->benchmarks.end() && run->benchmarks.size() == 1) {
    it = run->benchmarks.begin();
  }
  if (it == run->benchmarks.end()) {
    r.error = bin + ": no result for " + name;
    return r;
  }
  if (!it->second.error.empty()) {
    r.error = bin + ": " + it->second.error;
    return r;
  }
  const std::vector<double>* t = FindMetric(it->second, kTimeMetric);
  if (t == nullptr || !((*t)[0] > 0)) {
    r.error = bin + ": no time for " + name;
    return r;
  }
  r.ns = MedianOf(*t);
  r.limit = LimitOf(it->second);
  r.info = run->info;
  return r;
}

}  // namespace

StatusOr<std::vector<AbRow>> RunAb(const AbOptions& o,
                                   std::vector<std::string>* only_new) {
  if (o.rounds < 1) {
    return Status::InvalidArgument("rounds must be >= 1, got " +
                                   std::to_string(o.rounds));
  }
  ATTNKIT_ASSIGN_OR_RETURN(std::vector<std::string> new_names,
                           ListBenchmarks(o.new_bin, o.filter));
  ATTNKIT_ASSIGN_OR_RETURN(std::vector<std::string> base_names,
                           ListBenchmarks(o.base_bin, o.filter));
  const std::set<std::string> in_base(base_names.begin(), base_names.end());
  std::vector<AbRow> rows;
  for (const std::string& n : new_names) {
    if (in_base.count(n)) {
      rows.push_back(AbRow{n, {}, ""});
    } else if (only_new != nullptr) {
      only_new->push_back(n);
    }
  }
  for (int round = 0; round < o.rounds; ++round) {
    for (size_t i = 0; i < rows.size(); ++i) {
      AbRow& row = rows[i];
      std::fprintf(stderr, "\rbench ab: round %d/%d, benchmark %zu/%zu   ",
                   round + 1, o.rounds, i + 1, rows.size());
      const bool base_first = AbBaseFirst(round, static_cast<int>(i));
      OneRun first =
          RunOne(base_first ? o.base_bin : o.new_bin, row.name, o.min_time);
      OneRun second =
          RunOne(base_first ? o.new_bin : o.base_bin, row.name, o.min_time);
      const OneRun& b = base_first ? first : second;
      const OneRun& n = base_first ? second : first;
      for (const OneRun* x : {&b, &n}) {
        if (!x->error.empty() && row.error.empty()) row.error = x->error;
      }
      // The two binaries measure this benchmark differently (a BASE from
      // before a method change): their times are not comparable.
      if (row.error.empty() && b.error.empty() && n.error.empty()) {
        if (std::string why = MethodMismatch(row.name, b.info, n.info);
            !why.empty()) {
          row.error = "not compared: " + why;
        }
      }
      row.rounds.push_back(AbRound{b.ns, n.ns, b.limit, n.limit});
    }
  }
  std::fprintf(stderr, "\n");
  return rows;
}

}  // namespace attnkit::bench
