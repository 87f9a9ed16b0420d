// A backend run in a worker process: the gate survives the kernels it tests.
//
// RemoteBackend starts `attnkit_worker` (exec'd, never forked: this process
// has OpenMP threads) serving one backend -- a plug-in by path or a
// registered backend by name -- and forwards every call over a socket. The
// tensors stay where they are: the tools allocate them in shared segments
// (runtime/shared_memory.h's Scope, when InWorkerProcess()), and a request
// names (segment, offset) instead of copying; a view outside every segment (a
// std::vector, a buffer allocated before isolation was enabled) is staged
// through a scratch segment -- copied in, and for outputs copied back -- so
// correctness never depends on who allocated.
//
// Each call has a deadline (fixed, or derived from its cost with a floor).
// When the worker dies in a call -- a signal, any exit (exit(0) too), or the
// deadline passing (it is then killed) -- the call returns INTERNAL naming
// the entry point, the signal or exit code and the worker's last output
// lines, LastFault() says which, and the next call starts a fresh worker.
// The worker's stdout and stderr go to a pipe this side drains: a plug-in's
// prints never mix into a report, and its last lines explain a death.
//
// What the worker counts during a call (allocations, bytes copied by an
// append) is added to this process's meters (accounting::RecordRemote), so
// the decode report holds an isolated backend to the same gate.
#ifndef ATTNKIT_BACKENDS_REMOTE_H_
#define ATTNKIT_BACKENDS_REMOTE_H_

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/shared_memory.h"
#include "runtime/status.h"

namespace attnkit::backends {

// What a worker serves: exactly one of the two.
struct WorkerSpec {
  std::string registered;   // a registered backend's name
  std::string plugin_path;  // a plug-in library
};

struct RemoteOptions {
  // A call's deadline in seconds: this when > 0, else CallDeadline's.
  double call_timeout_s = 0;
};

// The default deadline of a call: 10 s, plus the call's arithmetic at
// 0.1 GFLOP/s (a scalar kernel under a sanitizer is ~10x faster than that).
double CallDeadline(double flops);

class RemoteBackend final : public Backend {
 public:
  // Starts a worker and asks it for the backend's name. Errors name the
  // spec: a plug-in that does not load (the loader's message), a worker that
  // cannot start or dies while loading.
  static StatusOr<std::unique_ptr<RemoteBackend>> Start(
      const WorkerSpec& spec, const RemoteOptions& options = {});
  ~RemoteBackend() override;

  std::string_view name() const override { return name_; }
  Status Supports(const AttentionProblem& p) const override;
  Status Attention(const AttentionProblem& p,
                   const AttentionArgs& args) override;
  Status ReserveWorkspace(const AttentionProblem& largest) override;
  Status AppendKv(const KvAppendArgs& a) override;
  Status SupportsBlock(const AttentionBlockProblem& p) const override;
  Status AttentionBlock(const AttentionBlockProblem& p,
                        const AttentionBlockArgs& args) override;
  Fault LastFault() const override { return fault_; }
  bool InWorkerProcess() const override { return true; }
  void Reset() override;

  // Workers that died (crash, exit or timeout) since Start.
  int deaths() const { return deaths_; }
  // The worker's process id, -1 between a death and the next call.
  pid_t worker_pid() const { return pid_; }

 private:
  explicit RemoteBackend(WorkerSpec spec, RemoteOptions options);
  Status Spawn();
  std::string Who() const;  // "plugin=PATH" or "backend=NAME"
  void Kill();
  // Sends the request in out_ (with new segments' fds), waits up to
  // `deadline_s` for the response into in_. On a death: fault_, deaths_,
  // the worker reaped, and an INTERNAL status naming `what`.
  Status Call(const char* what, double deadline_s);
  // After the socket closed: waits (bounded) for the worker's status.
  Status Reap(const char* what, double deadline_s);
  double Deadline(double work) const;
  // Sizes the scratch segment for the views outside every shared segment.
  Status PrepareScratch(std::initializer_list<const TensorView*> views);
  // Adds a tensor to the request: its segment (registering it with the
  // worker on first use) or a staged copy. `written`: copied back after.
  void PutTensor(const TensorView& t, bool written);
  void AddSegment(const shared_memory::Segment& s);
  Status BeginRequest(uint32_t op);
  void CopyBackStaged();
  void DrainOutput();
  std::string OutputTail() const;
  Status Died(const char* what, Fault kind, int code, double deadline_s);

  WorkerSpec spec_;
  RemoteOptions options_;
  std::string name_;
  pid_t pid_ = -1;
  int sock_ = -1;
  int out_fd_ = -1;  // the worker's stdout+stderr, non-blocking
  Fault fault_ = Fault::kNone;
  int deaths_ = 0;

  // Request/response buffers, reused (no allocation per call once sized).
  std::vector<uint8_t> out_, in_;
  size_t in_len_ = 0;
  std::vector<int> fds_;            // descriptors of this request
  std::vector<uint64_t> sent_;      // segments the worker has mapped
  std::vector<uint64_t> released_;  // of those, freed here since
  std::vector<uint64_t> new_ids_;   // segments this request introduces
  std::vector<uint64_t> new_sizes_;
  struct Staged {
    std::byte* user = nullptr;
    size_t scratch_offset = 0;
    size_t bytes = 0;
    bool written = false;
  };
  std::vector<Staged> staged_;
  shared_memory::Segment scratch_;  // id 0 until first needed
  size_t scratch_used_ = 0;
  // The worker's last output bytes (a ring).
  std::array<char, 8192> tail_{};
  size_t tail_len_ = 0, tail_pos_ = 0;
};

}  // namespace attnkit::backends

#endif  // ATTNKIT_BACKENDS_REMOTE_H_
