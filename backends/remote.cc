#include "backends/remote.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "backends/wire.h"
#include "runtime/text.h"

extern char** environ;

namespace attnkit::backends {
namespace {

using Clock = std::chrono::steady_clock;

// The worker binaries (CMake): the small one serves plug-ins and starts in
// milliseconds; the full one links every registered backend (and so LLVM).
#ifndef ATTNKIT_WORKER_BIN
#error "ATTNKIT_WORKER_BIN must name the attnkit_worker binary"
#endif
#ifndef ATTNKIT_PLUGIN_WORKER_BIN
#error "ATTNKIT_PLUGIN_WORKER_BIN must name the attnkit_plugin_worker binary"
#endif

// The worker binary: beside the running tool when it is there (an
// installed prefix's bin/, where the build tree may be gone), else where
// the build put it.
std::string WorkerBinary(bool plugin) {
  const char* name = plugin ? "attnkit_plugin_worker" : "attnkit_worker";
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir.resize(dir.rfind('/') + 1);
    const std::string sibling = dir + name;
    if (access(sibling.c_str(), X_OK) == 0) return sibling;
  }
  return plugin ? ATTNKIT_PLUGIN_WORKER_BIN : ATTNKIT_WORKER_BIN;
}

// The worker's descriptor for its end of the socket.
constexpr int kWorkerSocketFd = 3;
// How long a worker that closed its socket gets to finish dying before it
// is killed.
constexpr double kReapGraceS = 2.0;
constexpr size_t kTailLines = 12;

// A descriptor >= 10, close-on-exec (so no dup2 in the child maps an fd
// onto itself, which would keep close-on-exec set).
int MoveHigh(int fd) {
  const int high = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  close(fd);
  return high;
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return "signal " + std::to_string(sig) +
         (abbrev != nullptr ? " (SIG" + std::string(abbrev) + ")" : "");
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g s", s);
  return buf;
}

}  // namespace

double CallDeadline(double flops) { return 10.0 + flops / 1e8; }

RemoteBackend::RemoteBackend(WorkerSpec spec, RemoteOptions options)
    : spec_(std::move(spec)), options_(options) {
  out_.reserve(wire::kMaxMessage);
  in_.resize(wire::kMaxMessage);
  fds_.reserve(wire::kMaxFds);
  new_sizes_.reserve(wire::kMaxFds);
  sent_.reserve(256);
  released_.reserve(256);
  new_ids_.reserve(wire::kMaxFds);
  staged_.reserve(8);
}

RemoteBackend::~RemoteBackend() {
  Kill();
  if (scratch_.base != nullptr) {
    munmap(scratch_.base, scratch_.size);
    close(scratch_.fd);
  }
}

StatusOr<std::unique_ptr<RemoteBackend>> RemoteBackend::Start(
    const WorkerSpec& spec, const RemoteOptions& options) {
  std::unique_ptr<RemoteBackend> b(new RemoteBackend(spec, options));
  ATTNKIT_RETURN_IF_ERROR(b->Spawn());
  return b;
}

Status RemoteBackend::Spawn() {
  fault_ = Fault::kNone;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return Status::Internal(std::string("socketpair: ") + std::strerror(errno));
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    close(sv[0]);
    close(sv[1]);
    return Status::Internal(std::string("pipe: ") + std::strerror(errno));
  }
  const int child_sock = MoveHigh(sv[1]);
  const int child_out = MoveHigh(pipe_fds[1]);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, child_out, 1);
  posix_spawn_file_actions_adddup2(&fa, child_out, 2);
  posix_spawn_file_actions_adddup2(&fa, child_sock, kWorkerSocketFd);
  const bool plugin = !spec_.plugin_path.empty();
  const std::string bin_path = WorkerBinary(plugin);
  const char* bin = bin_path.c_str();
  std::string fd_arg = std::to_string(kWorkerSocketFd);
  std::vector<char*> argv{const_cast<char*>(bin),
                          const_cast<char*>("--socket"),
                          fd_arg.data(),
                          const_cast<char*>(plugin ? "--plugin" : "--backend"),
                          const_cast<char*>(plugin ? spec_.plugin_path.c_str()
                                                   : spec_.registered.c_str()),
                          nullptr};
  // The environment as is, except that a sanitizer in the worker leaves
  // SIGSEGV/SIGBUS/SIGABRT to the kernel: a crash is reported as the signal
  // it is (a sanitizer's own findings still exit with its report).
  std::vector<std::string> env_text;
  std::string asan = "ASAN_OPTIONS=";
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "ASAN_OPTIONS=", 13) == 0) {
      asan = std::string(*e) + ":";
    } else {
      env_text.emplace_back(*e);
    }
  }
  env_text.push_back(asan + "handle_segv=0:handle_sigbus=0:handle_abort=0");
  std::vector<char*> env;
  for (std::string& e : env_text) env.push_back(e.data());
  env.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, bin, &fa, nullptr, argv.data(), env.data());
  posix_spawn_file_actions_destroy(&fa);
  close(child_sock);
  close(child_out);
  if (rc != 0) {
    close(sv[0]);
    close(pipe_fds[0]);
    return Status::Internal(Who() + ": cannot start the worker " + bin + ": " +
                            std::strerror(rc));
  }
  pid_ = pid;
  sock_ = sv[0];
  out_fd_ = pipe_fds[0];
  fcntl(out_fd_, F_SETFL, fcntl(out_fd_, F_GETFL) | O_NONBLOCK);
  sent_.clear();
  released_.clear();
  // The scratch segment is per worker: the new one maps it afresh.
  if (scratch_.base != nullptr) {
    munmap(scratch_.base, scratch_.size);
    close(scratch_.fd);
    scratch_ = {};
  }
  ATTNKIT_RETURN_IF_ERROR(
      BeginRequest(static_cast<uint32_t>(wire::Op::kHello)));
  ATTNKIT_RETURN_IF_ERROR(Call("start-up (loading the backend)", 60.0));
  wire::Reader r(std::span<const uint8_t>(in_.data(), in_len_));
  Status s;
  std::string name;
  if (!r.GetStatus(s) || !r.GetString(name)) {
    Kill();
    return Status::Internal(Who() + ": the worker's hello is malformed");
  }
  if (!s.ok()) {
    Kill();
    return s;
  }
  if (!name_.empty() && name != name_) {
    Kill();
    return Status::Internal(Who() + ": the restarted worker's backend is '" +
                            name + "', not '" + name_ + "'");
  }
  name_ = std::move(name);
  return Status::Ok();
}

std::string RemoteBackend::Who() const {
  return spec_.plugin_path.empty() ? "backend=" + spec_.registered
                                   : "plugin=" + spec_.plugin_path;
}

void RemoteBackend::Kill() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
  for (int* fd : {&sock_, &out_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

void RemoteBackend::Reset() { Kill(); }

void RemoteBackend::DrainOutput() {
  if (out_fd_ < 0) return;
  char buf[4096];
  while (true) {
    const ssize_t n = read(out_fd_, buf, sizeof(buf));
    if (n <= 0) return;
    for (ssize_t i = 0; i < n; ++i) {
      tail_[tail_pos_] = buf[i];
      tail_pos_ = (tail_pos_ + 1) % tail_.size();
    }
    tail_len_ = std::min(tail_.size(), tail_len_ + static_cast<size_t>(n));
  }
}

std::string RemoteBackend::OutputTail() const {
  std::string all;
  all.reserve(tail_len_);
  const size_t start = (tail_pos_ + tail_.size() - tail_len_) % tail_.size();
  for (size_t i = 0; i < tail_len_; ++i) {
    all += tail_[(start + i) % tail_.size()];
  }
  while (!all.empty() && all.back() == '\n') all.pop_back();
  if (all.empty()) return "";
  // The last kTailLines lines, each made safe for a terminal and a report.
  size_t from = all.size();
  for (size_t lines = 0; from > 0 && lines < kTailLines; --from) {
    if (all[from - 1] == '\n' && ++lines == kTailLines) break;
  }
  std::string out;
  size_t at = from;
  while (at < all.size()) {
    size_t nl = all.find('\n', at);
    if (nl == std::string::npos) nl = all.size();
    out += "\n  | " + TerminalSafe(std::string_view(all).substr(at, nl - at));
    at = nl + 1;
  }
  return out;
}

Status RemoteBackend::Died(const char* what, Fault kind, int code,
                           double deadline_s) {
  fault_ = kind;
  ++deaths_;
  std::string how;
  switch (kind) {
    case Fault::kCrash:
      how = "crashed: the worker was killed by " + SignalName(code);
      break;
    case Fault::kExit:
      how = "exited: the worker exited with status " + std::to_string(code);
      break;
    case Fault::kTimeout:
      how = "timed out: no answer within " + Seconds(deadline_s) +
            (options_.call_timeout_s > 0
                 ? " (--case-timeout)"
                 : " (from the call's cost; --case-timeout sets it)") +
            "; the worker was killed";
      break;
    case Fault::kNone:
      break;
  }
  DrainOutput();
  const std::string tail = OutputTail();
  Kill();
  return Status::Internal((name_.empty() ? Who() + ": worker" : name_) + " " +
                          how + " in " + what +
                          (tail.empty() ? "" : "; its last output:" + tail));
}

Status RemoteBackend::BeginRequest(uint32_t op) {
  fault_ = Fault::kNone;
  tail_len_ = 0;
  if (pid_ < 0) ATTNKIT_RETURN_IF_ERROR(Spawn());
  out_.clear();
  fds_.clear();
  new_ids_.clear();
  new_sizes_.clear();
  staged_.clear();
  scratch_used_ = 0;
  wire::Writer w(out_);
  w.Put(op);
  return Status::Ok();
}

Status RemoteBackend::PrepareScratch(
    std::initializer_list<const TensorView*> views) {
  size_t need = 0;
  for (const TensorView* t : views) {
    const uint64_t span = SpanBytes(t->shape, t->strides, t->dtype);
    if (t->data == nullptr || span == 0) continue;
    if (span > (uint64_t{1} << 46)) {
      return Status::InvalidArgument("a tensor of " + t->DebugString() +
                                     " spans more bytes than can be staged");
    }
    if (!shared_memory::Find(t->data, span)) need += (span + 63) / 64 * 64;
  }
  if (need <= scratch_.size) return Status::Ok();
  if (scratch_.base != nullptr) {
    released_.push_back(scratch_.id);
    munmap(scratch_.base, scratch_.size);
    close(scratch_.fd);
    scratch_ = {};
  }
  auto seg = shared_memory::CreateUnregistered(std::max(need, size_t{1} << 20));
  if (!seg) {
    return Status::ResourceExhausted(
        "cannot create a shared scratch segment of " + std::to_string(need) +
        " bytes: " + std::strerror(errno));
  }
  scratch_ = *seg;
  return Status::Ok();
}

void RemoteBackend::AddSegment(const shared_memory::Segment& s) {
  if (std::find(sent_.begin(), sent_.end(), s.id) != sent_.end() ||
      std::find(new_ids_.begin(), new_ids_.end(), s.id) != new_ids_.end()) {
    return;
  }
  new_ids_.push_back(s.id);
  new_sizes_.push_back(s.size);
  fds_.push_back(s.fd);
}

void RemoteBackend::PutTensor(const TensorView& t, bool written) {
  wire::TensorRef ref;
  ref.dtype = t.dtype;
  ref.shape = t.shape;
  ref.strides = t.strides;
  const uint64_t span = SpanBytes(t.shape, t.strides, t.dtype);
  if (t.data == nullptr) {
    ref.segment = 0;
  } else if (span == 0) {
    ref.segment = wire::kEmptySegment;
  } else if (auto seg = shared_memory::Find(t.data, span)) {
    AddSegment(*seg);
    ref.segment = seg->id;
    ref.offset =
        static_cast<uint64_t>(static_cast<std::byte*>(t.data) - seg->base);
  } else {
    // Outside every segment: a copy in the scratch (PrepareScratch sized
    // it), copied back after the call when the backend writes it.
    std::memcpy(scratch_.base + scratch_used_, t.data, span);
    staged_.push_back({static_cast<std::byte*>(t.data), scratch_used_,
                       static_cast<size_t>(span), written});
    AddSegment(scratch_);
    ref.segment = scratch_.id;
    ref.offset = scratch_used_;
    scratch_used_ += (span + 63) / 64 * 64;
  }
  wire::Writer(out_).PutTensor(ref);
}

void RemoteBackend::CopyBackStaged() {
  for (const Staged& s : staged_) {
    if (s.written) {
      std::memcpy(s.user, scratch_.base + s.scratch_offset, s.bytes);
    }
  }
}

Status RemoteBackend::Call(const char* what, double deadline_s) {
  // The segment trailer: segments new to the worker (their fds ride along),
  // then the ones freed here since the last request.
  for (size_t i = 0; i < sent_.size();) {
    if (sent_[i] != scratch_.id && !shared_memory::IsLive(sent_[i])) {
      released_.push_back(sent_[i]);
      sent_[i] = sent_.back();
      sent_.pop_back();
    } else {
      ++i;
    }
  }
  wire::Writer w(out_);
  w.Put(static_cast<uint32_t>(new_ids_.size()));
  for (size_t i = 0; i < new_ids_.size(); ++i) {
    w.Put(new_ids_[i]);
    w.Put(static_cast<uint64_t>(new_sizes_[i]));
  }
  w.Put(static_cast<uint32_t>(released_.size()));
  for (uint64_t id : released_) w.Put(id);
  if (out_.size() > wire::kMaxMessage) {
    return Status::InvalidArgument(
        std::string(what) + ": the request is " + std::to_string(out_.size()) +
        " bytes, over the worker protocol's " +
        std::to_string(wire::kMaxMessage) + " (too many sequences)");
  }
  DrainOutput();
  if (!wire::SendMessage(sock_, out_, fds_)) {
    // The worker is gone (or going): how it ended is the finding.
    return Reap(what, deadline_s);
  }
  sent_.insert(sent_.end(), new_ids_.begin(), new_ids_.end());
  released_.clear();
  const auto end = Clock::now() + std::chrono::duration<double>(deadline_s);
  while (true) {
    pollfd p[2] = {{sock_, POLLIN, 0}, {out_fd_, POLLIN, 0}};
    const double left =
        std::chrono::duration<double>(end - Clock::now()).count();
    if (left <= 0) {
      return Died(what, Fault::kTimeout, 0, deadline_s);
    }
    const int ms = static_cast<int>(std::min(left * 1000 + 1, 1e9));
    const int n = poll(p, out_fd_ >= 0 ? 2 : 1, ms);
    if (n < 0 && errno != EINTR) {
      return Status::Internal(std::string("poll: ") + std::strerror(errno));
    }
    if (n <= 0) continue;
    if (p[1].revents != 0) {
      DrainOutput();
      if ((p[1].revents & (POLLHUP | POLLERR)) != 0 &&
          (p[1].revents & POLLIN) == 0) {
        close(out_fd_);  // the worker closed its output; keep waiting
        out_fd_ = -1;
      }
    }
    if (p[0].revents == 0) continue;
    const long got = wire::RecvMessage(sock_, in_, nullptr);
    if (got <= 0) return Reap(what, deadline_s);
    in_len_ = static_cast<size_t>(got);
    CopyBackStaged();
    return Status::Ok();
  }
}

Status RemoteBackend::Reap(const char* what, double deadline_s) {
  // The socket closed: the worker is dying. Wait (bounded) for its status.
  const auto end = Clock::now() + std::chrono::duration<double>(kReapGraceS);
  int status = 0;
  while (true) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (r < 0 && errno != EINTR) {
      return Died(what, Fault::kCrash, SIGKILL, deadline_s);
    }
    if (Clock::now() >= end) {
      // Alive with its socket closed (a kernel that closed descriptors it
      // does not own): it cannot answer, so it is killed.
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    DrainOutput();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  pid_ = -1;  // reaped: Kill() must not wait for it again
  if (WIFSIGNALED(status)) {
    return Died(what, Fault::kCrash, WTERMSIG(status), deadline_s);
  }
  return Died(what, Fault::kExit, WEXITSTATUS(status), deadline_s);
}

namespace {

// A response: the status, then (for calls that count) the worker's meter.
Status ReadResult(std::span<const uint8_t> msg, bool counted) {
  wire::Reader r(msg);
  Status s;
  accounting::Counts c;
  if (!r.GetStatus(s) || (counted && !r.GetCounts(c)) || !r.done()) {
    return Status::Internal("malformed response from the worker");
  }
  if (counted) accounting::RecordRemote(c);
  return s;
}

}  // namespace

Status RemoteBackend::Supports(const AttentionProblem& p) const {
  auto* self = const_cast<RemoteBackend*>(this);
  ATTNKIT_RETURN_IF_ERROR(
      self->BeginRequest(static_cast<uint32_t>(wire::Op::kSupports)));
  wire::Writer(self->out_).PutProblem(p);
  ATTNKIT_RETURN_IF_ERROR(self->Call("supports", self->Deadline(0)));
  return ReadResult({in_.data(), in_len_}, false);
}

Status RemoteBackend::ReserveWorkspace(const AttentionProblem& largest) {
  ATTNKIT_RETURN_IF_ERROR(
      BeginRequest(static_cast<uint32_t>(wire::Op::kReserve)));
  wire::Writer(out_).PutProblem(largest);
  ATTNKIT_RETURN_IF_ERROR(Call("reserve_workspace", Deadline(0)));
  return ReadResult({in_.data(), in_len_}, false);
}

Status RemoteBackend::Attention(const AttentionProblem& p,
                                const AttentionArgs& args) {
  ATTNKIT_RETURN_IF_ERROR(
      BeginRequest(static_cast<uint32_t>(wire::Op::kAttention)));
  ATTNKIT_RETURN_IF_ERROR(
      PrepareScratch({&args.q, &args.k, &args.v, &args.bias, &args.out,
                      &args.k_scale, &args.v_scale}));
  wire::Writer(out_).PutProblem(p);
  PutTensor(args.q, false);
  PutTensor(args.k, false);
  PutTensor(args.v, false);
  PutTensor(args.bias, false);
  PutTensor(args.out, true);
  // An i8 K/V's scales (null views otherwise) travel like K and V.
  PutTensor(args.k_scale, false);
  PutTensor(args.v_scale, false);
  ATTNKIT_RETURN_IF_ERROR(Call("attention", Deadline(p.Flops())));
  return ReadResult({in_.data(), in_len_}, true);
}

Status RemoteBackend::AppendKv(const KvAppendArgs& a) {
  ATTNKIT_RETURN_IF_ERROR(
      BeginRequest(static_cast<uint32_t>(wire::Op::kAppend)));
  ATTNKIT_RETURN_IF_ERROR(PrepareScratch(
      {&a.k_cache, &a.v_cache, &a.new_k, &a.new_v, &a.k_scale, &a.v_scale}));
  PutTensor(a.k_cache, true);
  PutTensor(a.v_cache, true);
  PutTensor(a.new_k, false);
  PutTensor(a.new_v, false);
  // An i8 cache's scales: the append writes the new tokens' (the worker's
  // backend quantizes -- its own hook or the portable append -- so a hook's
  // bug is caught as it would be in this process).
  PutTensor(a.k_scale, true);
  PutTensor(a.v_scale, true);
  wire::Writer w(out_);
  w.PutInts(a.positions);
  w.PutInts(a.new_lens);
  // An append moves bytes: its cost is what it writes and reads.
  const double bytes = 2.0 * static_cast<double>(AppendedBytes(a));
  ATTNKIT_RETURN_IF_ERROR(Call("append_kv", Deadline(bytes)));
  return ReadResult({in_.data(), in_len_}, true);
}

Status RemoteBackend::SupportsBlock(const AttentionBlockProblem& p) const {
  auto* self = const_cast<RemoteBackend*>(this);
  ATTNKIT_RETURN_IF_ERROR(
      self->BeginRequest(static_cast<uint32_t>(wire::Op::kSupportsBlock)));
  wire::Writer(self->out_).PutBlockProblem(p);
  ATTNKIT_RETURN_IF_ERROR(self->Call("supports_block", self->Deadline(0)));
  return ReadResult({in_.data(), in_len_}, false);
}

Status RemoteBackend::AttentionBlock(const AttentionBlockProblem& p,
                                     const AttentionBlockArgs& a) {
  ATTNKIT_RETURN_IF_ERROR(
      BeginRequest(static_cast<uint32_t>(wire::Op::kAttentionBlock)));
  ATTNKIT_RETURN_IF_ERROR(
      PrepareScratch({&a.x, &a.wq, &a.wk, &a.wv, &a.bq, &a.bk, &a.bv, &a.wo,
                      &a.bias, &a.k_cache, &a.v_cache, &a.out}));
  wire::Writer(out_).PutBlockProblem(p);
  for (const TensorView* t :
       {&a.x, &a.wq, &a.wk, &a.wv, &a.bq, &a.bk, &a.bv, &a.wo, &a.bias}) {
    PutTensor(*t, false);
  }
  // The block writes the new tokens' cache slots and out.
  PutTensor(a.k_cache, true);
  PutTensor(a.v_cache, true);
  PutTensor(a.out, true);
  ATTNKIT_RETURN_IF_ERROR(Call("attention_block", Deadline(p.Flops())));
  return ReadResult({in_.data(), in_len_}, true);
}

double RemoteBackend::Deadline(double work) const {
  return options_.call_timeout_s > 0 ? options_.call_timeout_s
                                     : CallDeadline(work);
}

}  // namespace attnkit::backends
