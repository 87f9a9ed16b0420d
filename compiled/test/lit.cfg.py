# lit configuration for the compiled tier's IR tests (FileCheck).
import os
import lit.formats

config.name = "attnkit-compiled"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.attnkit_tools_dir, "test")
config.excludes = ["lit.cfg.py", "lit.site.cfg.py.in"]
config.environment["PATH"] = os.pathsep.join(
    [config.attnkit_tools_dir, config.llvm_tools_dir,
     config.environment.get("PATH", "")])
config.substitutions.append(("%attnkit-opt",
                             os.path.join(config.attnkit_tools_dir, "attnkit-opt")))
config.substitutions.append(("%attnkit-compile",
                             os.path.join(config.attnkit_tools_dir, "attnkit-compile")))
