# -*- Python -*-
# lit configuration for the llm dialect and pass tests.
# Run through CMake (`ctest -R lit` or `ninja check-lit`), or by hand:
#   python3 /usr/lib/llvm-19/build/utils/lit/lit.py -sv <build>/tests/lit
# or, without a configured build dir:
#   python3 /usr/lib/llvm-19/build/utils/lit/lit.py -sv tests/lit \
#       --param llmc_tools_dir=<build>/tools

import os
import sys

import lit.formats

config.name = "llmc-lit"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in", "Inputs"]
config.test_source_root = os.path.dirname(__file__)

tools_dir = lit_config.params.get("llmc_tools_dir",
                                  getattr(config, "llmc_tools_dir", None))
if not tools_dir:
    lit_config.fatal("llmc_tools_dir is not set: run lit on the build dir "
                     "(<build>/tests/lit) or pass --param llmc_tools_dir=<build>/tools")
llmc_opt = os.path.join(tools_dir, "llmc-opt")
if not os.path.exists(llmc_opt):
    lit_config.fatal("llmc-opt not found at %s (build the llmc-opt target)" % llmc_opt)

if not hasattr(config, "test_exec_root") or config.test_exec_root is None:
    config.test_exec_root = os.path.join(tools_dir, "..", "tests", "lit")

llvm_tools_dir = lit_config.params.get(
    "llvm_tools_dir", getattr(config, "llvm_tools_dir", "/usr/lib/llvm-19/bin"))
config.environment["PATH"] = os.pathsep.join(
    [tools_dir, llvm_tools_dir, config.environment.get("PATH", "")])
config.substitutions.append(("%llmc-opt", llmc_opt))
config.substitutions.append(("%python", sys.executable))
