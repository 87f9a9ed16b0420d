#include "runtime/interrupt.h"

#include <csignal>

namespace attnkit {
namespace {

std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void OnStopSignal(int sig) {
  int none = 0;
  if (!g_stop.compare_exchange_strong(none, sig)) {
    // The second one: the user means it.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

void InstallStopHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

const std::atomic<int>& StopSignal() { return g_stop; }

}  // namespace attnkit
