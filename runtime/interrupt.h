// SIGINT / SIGTERM as a stop request: the long runs (check's campaign, the
// decode report) poll it between units of work, then write a partial report
// marked interrupted and exit 128 + the signal (130, 143) -- a cancelled or
// timed-out CI job still leaves an honest, complete-as-far-as-it-went file.
// A second signal of either kind ends the process at once (default action).
#ifndef ATTNKIT_RUNTIME_INTERRUPT_H_
#define ATTNKIT_RUNTIME_INTERRUPT_H_

#include <atomic>

namespace attnkit {

// Installs the handlers (idempotent).
void InstallStopHandlers();
// The first signal received since InstallStopHandlers, 0 while none.
const std::atomic<int>& StopSignal();
// 128 + the signal: the shell's exit status of a process it ended.
inline int ExitStatusForSignal(int signal) { return 128 + signal; }

}  // namespace attnkit

#endif  // ATTNKIT_RUNTIME_INTERRUPT_H_
