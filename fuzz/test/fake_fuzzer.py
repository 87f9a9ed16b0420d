#!/usr/bin/env python3
"""A stand-in libFuzzer binary for run_target.test.

Checks that it got -max_total_time, sleeps FAKE_SEED_SECONDS (the seed
corpus pass), prints libFuzzer's "#3 INITED" line, then "runs" inputs until
SIGTERM, on which it does what libFuzzer's -handle_term does: "run
interrupted; exiting", the final stats, exit 72. FAKE_MODE=crash exits 1
right after the seed pass; FAKE_MODE=nostats leaves out the final stats.
FAKE_RECORD=FILE gets "stopped S", S the seconds from INITED to SIGTERM
("stopped in the seed pass" before INITED).
"""
import os
import signal
import sys
import time


def main():
    if not any(a.startswith("-max_total_time=") for a in sys.argv[1:]):
        sys.stderr.write("fake_fuzzer: no -max_total_time backstop\n")
        return 3
    mode = os.environ.get("FAKE_MODE", "fuzz")
    state = {"runs": 3, "inited": None}

    def term(signum, frame):
        path = os.environ.get("FAKE_RECORD")
        if path:
            with open(path, "w") as f:
                if state["inited"] is None:
                    f.write("stopped in the seed pass\n")
                else:
                    f.write("stopped %.2f\n" %
                            (time.monotonic() - state["inited"]))
        sys.stderr.write("==%d== libFuzzer: run interrupted; exiting\n" %
                         os.getpid())
        if mode != "nostats":
            sys.stderr.write("stat::number_of_executed_units: %d\n" %
                             state["runs"])
        sys.stderr.flush()
        os._exit(72)

    signal.signal(signal.SIGTERM, term)
    time.sleep(float(os.environ.get("FAKE_SEED_SECONDS", "0")))
    state["inited"] = time.monotonic()
    sys.stderr.write("#3\tINITED cov: 10 ft: 10 corp: 3/3b exec/s: 0\n")
    sys.stderr.flush()
    if mode == "crash":
        sys.stderr.write("==1== ERROR: libFuzzer: deadly signal\n")
        return 1
    while True:
        state["runs"] += 1
        time.sleep(0.01)


if __name__ == "__main__":
    sys.exit(main())
