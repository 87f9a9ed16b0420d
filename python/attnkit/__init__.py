"""attnkit from Python.

    import attnkit
    out = attnkit.reference.attention(q, k, v, mask="causal")   # NumPy in, out
    want = attnkit.oracle.attention(q, k, v, mask="causal")     # float64
    report = attnkit.check(my_attention, tier="default")        # the CLI's campaign
    print(report.summary)

`check(fn)` runs the same seeded campaign as `./attnkit check` with the
callable as the backend under test: every failure is shrunk and carries a
reproducer, `attnkit.check(fn, repro=failure.case)`. See README "Python".
"""

from ._attnkit import (  # noqa: F401  (the package's API)
    CheckReport,
    Failure,
    Problem,
    __version__,
    check,
    oracle,
    reference,
)

__all__ = [
    "CheckReport",
    "Failure",
    "Problem",
    "check",
    "oracle",
    "reference",
]
