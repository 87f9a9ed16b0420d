#!/usr/bin/env python3
"""expect_exit.py N COMMAND [ARGS...]

lit's %expect-exit: runs COMMAND with this process's stdin, stdout and
stderr, and exits 0 when it exited with status N, else 1 naming what it did
(a status, or the signal that killed it). `not` from LLVM only tells zero
from non-zero; the tools document distinct statuses (1: a finding, 2: bad
usage), and the tests check which.
"""
import subprocess
import sys


def main(argv):
    if len(argv) < 3:
        sys.stderr.write("usage: expect_exit.py N COMMAND [ARGS...]\n")
        return 2
    want = int(argv[1])
    got = subprocess.run(argv[2:]).returncode
    if got == want:
        return 0
    what = f"signal {-got}" if got < 0 else f"status {got}"
    sys.stderr.write(f"expect_exit: {argv[2]} ended with {what}, "
                     f"expected status {want}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
