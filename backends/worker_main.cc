// attnkit_worker / attnkit_plugin_worker: serves one backend to a
// RemoteBackend (backends/remote.h) over the socket on --socket FD, one
// request at a time, until the socket closes. Built twice from this file:
// attnkit_plugin_worker loads plug-ins only (it links no backend, so it
// starts in milliseconds -- a restart after a crash, a fresh worker per
// shrink candidate); attnkit_worker (ATTNKIT_WORKER_REGISTRY) also serves
// the registered backends by name.
//
// Nothing here trusts the request more than the caller would: every tensor
// must lie inside a segment it was given, or the call is an error (the
// backend is not run).
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/wire.h"
#include "plugin/loader.h"
#include "runtime/accounting.h"
#include "runtime/backend.h"
#include "runtime/status.h"
#ifdef ATTNKIT_WORKER_REGISTRY
#include "backends/registry.h"
#endif

namespace attnkit::backends {
namespace {

struct Mapping {
  std::byte* base = nullptr;
  size_t size = 0;
};

class Worker {
 public:
  Worker(int sock, std::unique_ptr<Backend> backend)
      : sock_(sock), backend_(std::move(backend)) {
    in_.resize(wire::kMaxMessage);
    out_.reserve(wire::kMaxMessage);
  }

  // Serves until the socket closes (0) or a protocol error (1).
  int Serve() {
    while (true) {
      fds_.clear();
      const long n = wire::RecvMessage(sock_, in_, &fds_);
      if (n == 0) return 0;
      if (n < 0) {
        std::fprintf(stderr, "attnkit worker: recv: %s\n",
                     std::strerror(errno));
        return 1;
      }
      out_.clear();
      if (!Handle({in_.data(), static_cast<size_t>(n)})) {
        std::fprintf(stderr, "attnkit worker: malformed request\n");
        return 1;
      }
      for (int fd : fds_) close(fd);
      if (!wire::SendMessage(sock_, out_)) return 1;
    }
  }

 private:
  // Reads the segment trailer at the end of a request: maps the new
  // segments (their fds came with the message), unmaps the released ones.
  bool Segments(wire::Reader& r) {
    uint32_t n_new = 0;
    if (!r.Get(n_new) || n_new != fds_.size()) return false;
    for (uint32_t i = 0; i < n_new; ++i) {
      uint64_t id = 0, size = 0;
      if (!r.Get(id) || !r.Get(size)) return false;
      void* p =
          mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fds_[i], 0);
      if (p == MAP_FAILED) return false;
      Unmap(id);
      maps_[id] = {static_cast<std::byte*>(p), static_cast<size_t>(size)};
    }
    uint32_t n_rel = 0;
    if (!r.Get(n_rel)) return false;
    for (uint32_t i = 0; i < n_rel; ++i) {
      uint64_t id = 0;
      if (!r.Get(id)) return false;
      Unmap(id);
    }
    return r.done();
  }

  void Unmap(uint64_t id) {
    auto it = maps_.find(id);
    if (it == maps_.end()) return;
    munmap(it->second.base, it->second.size);
    maps_.erase(it);
  }

  // The view of a ref, or an error naming it.
  Status Resolve(const wire::TensorRef& ref, const char* name,
                 TensorView& view) {
    view.dtype = ref.dtype;
    view.shape = ref.shape;
    view.strides = ref.strides;
    view.data = nullptr;
    if (ref.segment == 0) return Status::Ok();
    if (ref.segment == wire::kEmptySegment) {
      view.data = empty_;
      return Status::Ok();
    }
    auto it = maps_.find(ref.segment);
    const uint64_t span = SpanBytes(ref.shape, ref.strides, ref.dtype);
    if (it == maps_.end() || ref.offset > it->second.size ||
        span > it->second.size - ref.offset) {
      return Status::Internal(std::string("worker: tensor ") + name +
                              " is outside the memory it was given");
    }
    view.data = it->second.base + ref.offset;
    return Status::Ok();
  }

  bool Handle(std::span<const uint8_t> msg) {
    wire::Reader r(msg);
    uint32_t op = 0;
    if (!r.Get(op)) return false;
    wire::Writer w(out_);
    switch (static_cast<wire::Op>(op)) {
      case wire::Op::kHello:
        if (!Segments(r)) return false;
        w.PutStatus(Status::Ok());
        w.PutString(backend_->name());
        return true;
      case wire::Op::kSupports:
      case wire::Op::kReserve: {
        if (!r.GetProblem(problem_) || !Segments(r)) return false;
        w.PutStatus(
            static_cast<wire::Op>(op) == wire::Op::kSupports
                ? Guard([&] { return backend_->Supports(problem_); })
                : Guard([&] { return backend_->ReserveWorkspace(problem_); }));
        return true;
      }
      case wire::Op::kAttention: {
        constexpr int kTensors = 7;
        wire::TensorRef refs[kTensors];
        if (!r.GetProblem(problem_)) return false;
        for (auto& ref : refs) {
          if (!r.GetTensor(ref)) return false;
        }
        if (!Segments(r)) return false;
        AttentionArgs a;
        TensorView* views[kTensors] = {&a.q,   &a.k,       &a.v,      &a.bias,
                                       &a.out, &a.k_scale, &a.v_scale};
        const char* names[kTensors] = {"q",   "k",       "v",      "bias",
                                       "out", "k_scale", "v_scale"};
        Status s;
        for (int i = 0; i < kTensors && s.ok(); ++i) {
          s = Resolve(refs[i], names[i], *views[i]);
        }
        Metered(w, s, [&] { return backend_->Attention(problem_, a); });
        return true;
      }
      case wire::Op::kAppend: {
        constexpr int kTensors = 6;
        wire::TensorRef refs[kTensors];
        for (auto& ref : refs) {
          if (!r.GetTensor(ref)) return false;
        }
        if (!r.GetInts(positions_) || !r.GetInts(new_lens_) || !Segments(r)) {
          return false;
        }
        KvAppendArgs a;
        TensorView* views[kTensors] = {&a.k_cache, &a.v_cache, &a.new_k,
                                       &a.new_v,   &a.k_scale, &a.v_scale};
        const char* names[kTensors] = {"k_cache", "v_cache", "new_k",
                                       "new_v",   "k_scale", "v_scale"};
        Status s;
        for (int i = 0; i < kTensors && s.ok(); ++i) {
          s = Resolve(refs[i], names[i], *views[i]);
        }
        a.positions = positions_;
        a.new_lens = new_lens_;
        Metered(w, s, [&] { return backend_->AppendKv(a); });
        return true;
      }
      case wire::Op::kSupportsBlock: {
        if (!r.GetBlockProblem(block_) || !Segments(r)) return false;
        w.PutStatus(Guard([&] { return backend_->SupportsBlock(block_); }));
        return true;
      }
      case wire::Op::kAttentionBlock: {
        constexpr int kTensors = 12;
        wire::TensorRef refs[kTensors];
        if (!r.GetBlockProblem(block_)) return false;
        for (auto& ref : refs) {
          if (!r.GetTensor(ref)) return false;
        }
        if (!Segments(r)) return false;
        AttentionBlockArgs a;
        TensorView* views[kTensors] = {&a.x,    &a.wq,      &a.wk,      &a.wv,
                                       &a.bq,   &a.bk,      &a.bv,      &a.wo,
                                       &a.bias, &a.k_cache, &a.v_cache, &a.out};
        const char* names[kTensors] = {"x",    "wq",      "wk",      "wv",
                                       "bq",   "bk",      "bv",      "wo",
                                       "bias", "k_cache", "v_cache", "out"};
        Status s;
        for (int i = 0; i < kTensors && s.ok(); ++i) {
          s = Resolve(refs[i], names[i], *views[i]);
        }
        Metered(w, s, [&] { return backend_->AttentionBlock(block_, a); });
        return true;
      }
    }
    return false;
  }

  template <typename F>
  static Status Guard(F&& f) {
    try {
      return f();
    } catch (const std::exception& e) {
      return Status::Internal(std::string("threw: ") + e.what());
    }
  }

  // Runs the call under a meter (when `s` is OK) and writes its status and
  // counts.
  template <typename F>
  void Metered(wire::Writer& w, Status s, F&& call) {
    accounting::Counts c;
    if (s.ok()) {
      accounting::Meter meter;
      s = Guard(call);
      c = meter.Read();
    }
    w.PutStatus(s);
    w.PutCounts(c);
  }

  int sock_;
  std::unique_ptr<Backend> backend_;
  std::vector<uint8_t> in_, out_;
  std::vector<int> fds_;
  std::unordered_map<uint64_t, Mapping> maps_;
  AttentionProblem problem_;
  AttentionBlockProblem block_;
  std::vector<int64_t> positions_, new_lens_;
  alignas(64) std::byte empty_[64] = {};
};

// Answers the hello with `s` (the backend could not be made) and exits.
int Refuse(int sock, const Status& s) {
  std::vector<uint8_t> buf, out;
  if (wire::RecvMessage(sock, buf, nullptr) > 0) {
    wire::Writer w(out);
    w.PutStatus(s);
    w.PutString("");
    wire::SendMessage(sock, out);
  }
  return 0;
}

int Main(int argc, char** argv) {
  // Dies with the process that started it (a killed check leaves no worker
  // behind), and never outlives it if that already happened.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Unbuffered: what a kernel printed just before it crashed still reaches
  // the caller (it quotes the last lines in the finding).
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  int sock = -1;
  std::string plugin, backend;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--socket") sock = std::atoi(argv[i + 1]);
    if (flag == "--plugin") plugin = argv[i + 1];
    if (flag == "--backend") backend = argv[i + 1];
  }
  if (sock < 0 || plugin.empty() == backend.empty()) {
    std::fprintf(stderr,
                 "usage: %s --socket FD (--plugin lib.so | --backend NAME)\n"
                 "(started by attnkit's tools; not for direct use)\n",
                 argv[0]);
    return 2;
  }
  if (getppid() == 1) return 0;
  StatusOr<std::unique_ptr<Backend>> made =
      Status::Internal("no backend named");
  if (!plugin.empty()) {
    made = plugin::LoadPlugin(plugin);
  } else {
#ifdef ATTNKIT_WORKER_REGISTRY
    made = MakeBackend(backend);
#else
    made = Status::InvalidArgument(
        "backend=" + backend +
        ": this worker serves plug-ins only (attnkit_worker serves "
        "registered backends)");
#endif
  }
  if (!made.ok()) return Refuse(sock, made.status());
  Worker w(sock, std::move(*made));
  return w.Serve();
}

}  // namespace
}  // namespace attnkit::backends

int main(int argc, char** argv) { return attnkit::backends::Main(argc, argv); }
