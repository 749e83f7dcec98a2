# -*- Python -*-
# lit configuration for lwcc's FileCheck tests.
#
#   python3 -c 'import lit.main; lit.main.main()' -sv test/lit   (or: bash tools/dev.sh test)
#
# Tools (lwcc-opt, lwcc) come from <repo>/build/bin, or from $LWCC_BIN_DIR when set;
# FileCheck and not come from the same directory or from /usr/lib/llvm-14/bin.

import os

import lit.formats

config.name = "lwcc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".lwir", ".onnxtext", ".test"]
config.excludes = ["lit.cfg.py", "Inputs", "README.md"]

config.test_source_root = os.path.dirname(os.path.abspath(__file__))
repo_root = os.path.dirname(os.path.dirname(config.test_source_root))
config.test_exec_root = os.path.join(repo_root, "build", "test", "lit")
os.makedirs(config.test_exec_root, exist_ok=True)

bin_dir = os.path.abspath(os.environ.get("LWCC_BIN_DIR") or os.path.join(repo_root, "build", "bin"))
llvm_bin_dir = "/usr/lib/llvm-14/bin"
if not os.path.isfile(os.path.join(bin_dir, "lwcc-opt")):
    lit_config.warning("lwcc-opt not found in %s; build first (bash tools/dev.sh build)" % bin_dir)

config.environment["PATH"] = os.pathsep.join(
    [bin_dir, llvm_bin_dir, config.environment.get("PATH", os.environ.get("PATH", ""))]
)

# Optional capabilities that tests can REQUIRE.
if os.path.exists("/usr/local/cuda/bin/nvcc"):
    config.available_features.add("cuda")
