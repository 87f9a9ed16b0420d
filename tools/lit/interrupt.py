#!/usr/bin/env python3
"""interrupt.py SECONDS SIGNAL COMMAND [ARGS...]

lit's %interrupt: runs COMMAND, sends it SIGNAL (INT or TERM) after SECONDS,
waits for it, passes its output through and prints "exit: N" (N = its exit
status, or -S when signal S killed it) as the last line, so a test checks
what a cancelled CI job leaves behind. Exits 1 if COMMAND ended before the
signal was sent (the test would check nothing).
"""
import signal
import subprocess
import sys
import time


def main(argv):
    if len(argv) < 4:
        sys.stderr.write("usage: interrupt.py SECONDS INT|TERM COMMAND...\n")
        return 2
    delay = float(argv[1])
    sig = {"INT": signal.SIGINT, "TERM": signal.SIGTERM}[argv[2]]
    proc = subprocess.Popen(argv[3:])
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.stdout.flush()
            sys.stderr.write("interrupt: %s ended (status %d) before the "
                             "signal\n" % (argv[3], proc.returncode))
            return 1
        time.sleep(0.05)
    proc.send_signal(sig)
    code = proc.wait()
    sys.stdout.flush()
    print("exit: %d" % code)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
