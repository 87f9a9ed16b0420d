# The one lit configuration of every suite (harness/test, decode/test,
# bench/test, compiled/test): each folder's CMakeLists calls
# attnkit_lit_suite(), which writes the suite's lit.site.cfg.py (paths of
# this build) and adds one ctest, <name>_lit, running it.
#
# RUN lines name the build's tools bare (attnkit_cli, attnkit_decode,
# attnkit_bench, attnkit_bench_tool, attnkit-compile, attnkit-opt; each is
# substituted with its target's file) and see LLVM's on PATH (FileCheck,
# not), and these substitutions:
#   %expect-exit N   run the rest of the line, pass its output through, and
#                    fail unless it exited with status N (tools/lit/expect_exit.py)
#   %interrupt S INT|TERM
#                    run the rest of the line, send it the signal after S
#                    seconds, print "exit: N" (tools/lit/interrupt.py)
#   %python          this Python (checks of written JSON files)
#   %mlir_c_runner_utils
#                    MLIR's runtime library for mlir-runner (vector.print)
#   %example_plugin, %example_plugin_<variant>
#                    the example plug-in (plugin/example/) and its variants
# and the feature avx512dq when this CPU runs AVX-512F and DQ code
# (`%if avx512dq`).
import os
import re
import sys

import lit.formats

config.name = config.attnkit_suite_name
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".test", ".mlir"]
config.test_source_root = config.attnkit_suite_source_dir
config.test_exec_root = config.attnkit_suite_exec_dir
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in"]

config.environment["PATH"] = os.pathsep.join(
    [config.llvm_tools_dir, config.environment.get("PATH", "")])
# The build's tools (attnkit_cli, attnkit_decode, ...): a bare name in a RUN
# line becomes that target's file (not a path search, which a stale binary
# elsewhere in the build tree could win). Only a whole word between blanks or
# shell operators: never inside a path, a longer name or a quoted string.
lit_config.load_config(config, config.attnkit_tools_file)
for name, path in sorted(config.attnkit_tools.items(), reverse=True):
    config.substitutions.append(
        (r"(?<![^\s|;&(])" + re.escape(name) + r"(?![^\s|;&)])", path))
# The compiled backend's on-disk kernel cache: ctest's (in the build tree),
# off when lit runs by hand; a test that is about the cache sets its own.
config.environment["ATTNKIT_KERNEL_CACHE"] = os.environ.get(
    "ATTNKIT_KERNEL_CACHE", "off")
# The check's sharding falls back to these; a test sets them explicitly.
for var in ("GTEST_SHARD_INDEX", "GTEST_TOTAL_SHARDS"):
    config.environment.pop(var, None)

config.substitutions.append(
    ("%interrupt",
     '"%s" "%s"' % (sys.executable,
                    os.path.join(os.path.dirname(__file__), "interrupt.py"))))
config.substitutions.append(("%python", '"%s"' % sys.executable))
config.substitutions.append(
    ("%mlir_c_runner_utils",
     os.path.normpath(os.path.join(config.llvm_tools_dir, "..", "lib",
                                   "libmlir_c_runner_utils.so"))))
with open("/proc/cpuinfo") as cpuinfo:
    for line in cpuinfo:
        if line.startswith("flags"):
            if {"avx512f", "avx512dq"} <= set(line.split()):
                config.available_features.add("avx512dq")
            break
config.substitutions.append(
    ("%expect-exit",
     '"%s" "%s"' % (sys.executable,
                    os.path.join(os.path.dirname(__file__), "expect_exit.py"))))
for name, path in sorted(config.attnkit_plugins.items(), reverse=True):
    # Longest first: %example_plugin is a prefix of its variants.
    config.substitutions.append(("%" + name, path))
