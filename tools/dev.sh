#!/usr/bin/env bash
# lwcc developer entry point.
#
#   bash tools/dev.sh setup   install dependencies (tools/setup.sh)
#   bash tools/dev.sh build   set up, configure and build into build/ (executables in build/bin/)
#   bash tools/dev.sh run     set up, build, and run the main job on the bundled example
#   bash tools/dev.sh test    set up, build, and run every test suite, then print a summary
#                             (LWCC_TEST_CLANG=1: also a clang++-14 build of the C++ parts)
#
# LWCC_BUILD_TYPE selects the CMake build type (default RelWithDebInfo). Warnings
# are errors here (LWCC_WERROR=ON), unlike a plain cmake build.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD_DIR=build
RELEASE_DIR=build-release
BIN_DIR="$BUILD_DIR/bin"
LOG_DIR="$BUILD_DIR/test-logs"
# lit is a package without __main__, so `python3 -m lit` does not work; call its entry point.
LIT=(python3 -c 'import lit.main; lit.main.main()')

usage() {
  sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

cmd_setup() {
  bash tools/setup.sh
}

# ccache as the compiler launcher where it is installed (a rebuild of
# unchanged sources, and the Release suite's second build of them, is cheap).
launcher_flags() {
  if command -v ccache >/dev/null 2>&1; then
    echo "-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
    echo "-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"
  fi
}

# RelWithDebInfo's C++ optimized as Release's (-O3), with line tables only
# (-g1): backtraces, sanitizer reports and profiles keep their files and
# lines; full debug info (-g) took a third more compile time
# (passes/MemoryPlan.cpp: 13.7 s against 10.5 s), and the -O3 build fails
# on GCC's optimizer-only warnings as a Release build would (the Release
# suite checks that instead of building everything a second time).
# The unit tests' own sources at -O1 (LWCC_UNITTEST_OPT): they run in seconds
# at any level and compile in half the time (test/unit/GradCheckTest.cpp:
# 7.3 s against 12.7 s at -O3); what they test is built at -O3.
DEBUG_FLAGS=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O3 -g1 -DNDEBUG" -DLWCC_UNITTEST_OPT=-O1)

# Each step returns on failure explicitly: cmd_test calls this inside `if`, where set -e is off.
cmd_build() {
  cmd_setup || return
  # shellcheck disable=SC2046 # the launcher flags are words
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${LWCC_BUILD_TYPE:-RelWithDebInfo}" \
    "${DEBUG_FLAGS[@]}" -DLWCC_WERROR=ON $(launcher_flags) || return
  cmake --build "$BUILD_DIR" -j "$(nproc)" || return
}

# The main job: lwcc on the bundled AlexNet (tools/models; 64x64, half
# width, 10 classes: a size a CPU trains in a minute) and LeNet. It checks
# LeNet's gradients against finite differences, compiles AlexNet into a
# CUDA trainer (the default target: built with nvcc, trained when this
# machine has a GPU) and into a CPU trainer, and trains it on Fashion-MNIST
# (resized to 64x64, gray replicated to 3 channels) with a progress line,
# a JSONL log, evaluation on the test split, a checkpoint and an export.
# Then the same AlexNet for 4 devices: every strategy's predicted step side
# by side (pipelines included) and the chosen plan's layers or stages,
# trained on 4 emulated devices, its losses beside the one-device run's.
cmd_run() {
  cmd_build
  local dir="$BUILD_DIR/example"
  local lwcc="$BIN_DIR/lwcc"
  local data=/usr/share/datasets/fashion-mnist
  mkdir -p "$dir"
  step() { echo; echo "+ $*"; "$@"; }
  step python3 tools/models/gen.py lenet --batch 32 -o "$dir/lenet.onnx"
  step "$lwcc" "$dir/lenet.onnx" --check-gradients
  step python3 tools/models/gen.py alexnet --size 64 --width 0.5 --classes 10 --batch 32 \
    -o "$dir/alexnet.onnx"
  step "$lwcc" "$dir/alexnet.onnx" --emit=plan -o "$dir/alexnet-plan.txt"
  tail -n 2 "$dir/alexnet-plan.txt"
  local trainer="$dir/alexnet-trainer"
  # AlexNet from scratch stalls at chance with SGD's lr 0.01 here; 0.001 becomes the
  # trainer's compiled-in default (its --lr=X overrides it).
  if step "$lwcc" "$dir/alexnet.onnx" --lr=0.001 -o "$dir/alexnet-cuda-trainer" -v &&
    nvidia-smi -L >/dev/null 2>&1; then
    trainer="$dir/alexnet-cuda-trainer"
  else
    echo "  (no usable GPU here: training the CPU build instead)"
    step "$lwcc" "$dir/alexnet.onnx" --lr=0.001 --target=cpu -o "$dir/alexnet-trainer"
  fi
  rm -rf "$dir/checkpoints"
  local run=(--data="idx:$data" --train-examples=9600 --eval-examples=2000 --epochs=1 --eval
    --progress=lines --print-every=25)
  step "$trainer" "${run[@]}" --log="$dir/alexnet.jsonl" \
    --checkpoint-dir="$dir/checkpoints" --export="$dir/alexnet-trained.onnx"
  echo "  (log: $dir/alexnet.jsonl; checkpoint: $(ls "$dir/checkpoints"))"

  # Four devices: the plan of every strategy, and the chosen one trained.
  local target=cpu
  [[ $trainer == *cuda* ]] && target=cuda
  step "$lwcc" "$dir/alexnet.onnx" --gpus=4 --target="$target" --emit=plan \
    -o "$dir/alexnet-plan-4.txt"
  sed -n '/^parallel plan/,$p' "$dir/alexnet-plan-4.txt"
  step "$lwcc" "$dir/alexnet.onnx" --gpus=4 --target="$target" --lr=0.001 \
    -o "$dir/alexnet-trainer-4"
  step "$dir/alexnet-trainer-4" "${run[@]}" --log="$dir/alexnet-4.jsonl"
  python3 - "$dir/alexnet.jsonl" "$dir/alexnet-4.jsonl" <<'PY'
import json, sys
def steps(path):
    rows = [json.loads(line) for line in open(path)]
    return [r for r in rows if r.get("type") == "step"], [r for r in rows if r.get("type") == "eval"]
(one, e1), (four, e4) = steps(sys.argv[1]), steps(sys.argv[2])
print("\n  step   loss, 1 device   loss, 4 devices")
for a, b in list(zip(one, four))[:: max(1, len(one) // 8)] + list(zip(one, four))[-1:]:
    print(f"  {a['step']:>4}   {a['loss']:>14.6f}   {b['loss']:>15.6f}")
if e1 and e4:
    print(f"  evaluation accuracy: {e1[-1].get('accuracy')} on 1 device, "
          f"{e4[-1].get('accuracy')} on 4")
PY
}

# ---------------------------------------------------------------------------
# Test suites.
#
#   suite NAME CMD [ARGS...]
#
# runs CMD (its output goes to $LOG_DIR/<NAME up to " (", as a file name>.log and
# to the terminal when it ends) with LWCC_TEST_RESULT naming that name's .json, where the suite
# writes its result: test/e2e/harness.py's JSON (suite, passed, failed, skipped,
# seconds, failing), which the test/e2e scripts write themselves and the wrappers
# below write for the other tools. A suite that writes no result (it crashed),
# exits non-zero without reporting a failure, or reports no tests at all counts
# as one failure. Add a suite with one line in cmd_test.

SUITE_NAMES=()
SUITE_RESULTS=()
TOTAL_PASSED=0
TOTAL_FAILED=0
HARNESS=(python3 test/e2e/harness.py)

# GoogleTest: its JSON report, turned into the result.
gtest_suite() {
  local report="$LWCC_TEST_RESULT.gtest.json"
  rm -f "$report"
  "$@" --gtest_output="json:$report"
  local rc=$?
  [[ -s $report ]] && "${HARNESS[@]}" gtest "$(basename "$1")" "$report" "$LWCC_TEST_RESULT"
  return "$rc"
}

# lit: its JSON report (--output), turned into the result.
lit_suite() {
  local report="$LWCC_TEST_RESULT.lit.json"
  rm -f "$report"
  "${LIT[@]}" -o "$report" "$@"
  local rc=$?
  [[ -s $report ]] && "${HARNESS[@]}" lit lit "$report" "$LWCC_TEST_RESULT"
  return "$rc"
}

# counted_suite NAME CMD...: a script that counts itself only in its output,
# the ONNX node tests: its last line "N passed, M failed" ("onnx-node: N
# passed, M failed, K skipped" before it), turned into the result.
counted_suite() {
  local name="$1" log="$LWCC_TEST_RESULT.log"
  shift
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  "${HARNESS[@]}" counts "$name" "$log" "$LWCC_TEST_RESULT"
  return "$rc"
}

# Suites run LWCC_TEST_JOBS at a time (default 2: most suites keep one core
# busy, and CI has two), each into its log; a suite's output is printed when
# it ends, its line of the summary in the order of cmd_test. `suite_alone`
# runs one with nothing beside it (one whose checks time a peer's silence).
# LWCC_TEST_SUITES=TEXT[,TEXT...] runs only the suites whose names contain one.
SUITE_JOBS=${LWCC_TEST_JOBS:-2}
declare -A RUNNING=() # pid -> index into SUITE_NAMES
SUITE_CMDS=()
SUITE_SLUGS=()
SUITE_STARTS=()

suite() {
  local name="$1"
  shift
  if [[ -n ${LWCC_TEST_SUITES:-} ]]; then
    local want match=""
    IFS=, read -ra want <<<"$LWCC_TEST_SUITES"
    for match in "${want[@]}"; do [[ $name == *"$match"* ]] && break || match=""; done
    [[ -n $match ]] || return 0
  fi
  while ((${#RUNNING[@]} >= SUITE_JOBS)); do collect_suite; done
  local i=${#SUITE_NAMES[@]} slug
  slug=$(tr -c 'A-Za-z0-9\n' '_' <<<"${name%% (*}")
  mkdir -p "$LOG_DIR"
  rm -f "$LOG_DIR/$slug.json"
  SUITE_NAMES+=("$name")
  SUITE_RESULTS+=("")
  SUITE_CMDS+=("$*")
  SUITE_SLUGS+=("$slug")
  SUITE_STARTS+=("$SECONDS")
  echo "---- started: $name"
  (
    set +e
    LWCC_TEST_RESULT="$LOG_DIR/$slug.json" "$@" >"$LOG_DIR/$slug.log" 2>&1
    local rc=$?
    times >"$LOG_DIR/$slug.times" # its second line: the CPU time of what it ran
    exit "$rc"
  ) &
  RUNNING[$!]=$i
}

suite_alone() {
  while ((${#RUNNING[@]} > 0)); do collect_suite; done
  local jobs=$SUITE_JOBS
  SUITE_JOBS=1
  suite "$@"
  while ((${#RUNNING[@]} > 0)); do collect_suite; done
  SUITE_JOBS=$jobs
}

# The user + system seconds of a suite's commands, from its `times` output
# ("0m1.500s 0m0.250s" on the second line).
cpu_seconds() {
  awk 'NR == 2 {
    t = 0
    for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); t += p[1] * 60 + p[2] }
    printf "%.0f", t
  }' "$1" 2>/dev/null
}

# Waits for the next suite to end, prints its log and counts its result.
collect_suite() {
  local pid rc=0
  wait -n -p pid "${!RUNNING[@]}" || rc=$?
  local i=${RUNNING[$pid]}
  unset "RUNNING[$pid]"
  local name=${SUITE_NAMES[$i]} slug=${SUITE_SLUGS[$i]}
  local log="$LOG_DIR/$slug.log" json="$LOG_DIR/$slug.json" passed=0 failed=0 note="" result
  echo
  echo "==== $name: ${SUITE_CMDS[$i]} ===="
  cat "$log"
  if [[ -s $json ]] && read -r passed failed note < <("${HARNESS[@]}" summary "$json"); then
    result="$passed passed, $failed failed${note:+, $note}"
    if ((rc != 0 && failed == 0)); then
      result+=" (exit $rc without a reported failure; counted as 1 failed)"
      failed=1
    elif ((passed + failed == 0)); then
      result+=" (no tests ran; counted as 1 failed)"
      failed=1
    fi
  elif ((rc != 0)); then
    passed=0 failed=1
    result="could not run (exit $rc, no result written; counted as 1 failed)"
  else
    passed=0 failed=1
    result="exit 0 without writing a result (counted as 1 failed)"
  fi
  SUITE_RESULTS[i]="$result [$((SECONDS - SUITE_STARTS[i])) s, CPU $(cpu_seconds "$LOG_DIR/$slug.times") s]"
  TOTAL_PASSED=$((TOTAL_PASSED + passed))
  TOTAL_FAILED=$((TOTAL_FAILED + failed))
}

# Suites of named checks: check NAME CMD... runs CMD quietly (its output is
# shown when it fails) and prints PASS/FAIL; end_checks SUITE prints the counts
# and writes the result.
CHECKS_PASSED=0
CHECKS_FAILED=0
CHECKS_FAILING=()
check() {
  local name="$1" out
  shift
  if out=$("$@" 2>&1); then
    echo "PASS: $name"
    CHECKS_PASSED=$((CHECKS_PASSED + 1))
  else
    echo "FAIL: $name"
    tail -n 40 <<<"$out"
    CHECKS_FAILED=$((CHECKS_FAILED + 1))
    CHECKS_FAILING+=("$name")
  fi
}
end_checks() {
  echo "$CHECKS_PASSED passed, $CHECKS_FAILED failed"
  "${HARNESS[@]}" write "$1" "$CHECKS_PASSED" "$CHECKS_FAILED" "$LWCC_TEST_RESULT" \
    ${CHECKS_FAILING[@]+"${CHECKS_FAILING[@]}"}
  ((CHECKS_FAILED == 0))
}

# The Release suite: what a user's `cmake -DCMAKE_BUILD_TYPE=Release` gets.
#   1. a plain configure leaves LWCC_WERROR off (a new compiler's warning
#      cannot fail a user's build);
#   2. lwcc, lwcc-opt and the CPU runtime compile at -O3 (GCC's
#      optimizer-only warnings) with -Werror, so warnings stay at zero there:
#      $BUILD_DIR's own objects where it compiles all its C++ so (the test
#      command's default build, DEBUG_FLAGS), else a Release build of those
#      targets in $RELEASE_DIR (on CI's 2 cores about 5 minutes cold);
#   3. with that second build, its lwcc turns a model into the same training
#      IR and memory plan as the build in $BUILD_DIR.
release_suite() {
  local plain="$RELEASE_DIR/plain-configure" model="$RELEASE_DIR/lenet.onnx"
  CHECKS_PASSED=0 CHECKS_FAILED=0 CHECKS_FAILING=()
  rm -rf "$plain"
  check "plain Release configure leaves LWCC_WERROR off" bash -c \
    "cmake -S . -B '$plain' -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null &&
     grep -qx 'LWCC_WERROR:BOOL=OFF' '$plain/CMakeCache.txt'"
  rm -rf "$plain"
  if compiled_at_o3 "$BUILD_DIR"; then
    check "$BUILD_DIR compiled lwcc, lwcc-opt and the CPU runtime (all its C++) at -O3, -Werror" \
      compiled_at_o3 "$BUILD_DIR" lwcc lwcc-opt lwcc_runtime_cpu
  else
    check "Release build of lwcc, lwcc-opt and the CPU runtime, -Werror" bash -c \
      "cmake -S . -B '$RELEASE_DIR' -G Ninja -DCMAKE_BUILD_TYPE=Release -DLWCC_WERROR=ON \
         $(launcher_flags | tr '\n' ' ') >/dev/null &&
       cmake --build '$RELEASE_DIR' -j $(nproc) --target lwcc lwcc-opt lwcc_runtime_cpu"
    check "Release lwcc: the same training IR and memory plan" bash -c \
      "python3 tools/models/gen.py lenet --batch 4 -o '$model' >/dev/null &&
       for emit in train-ir plan; do
         $RELEASE_DIR/bin/lwcc $model --emit=\$emit >$RELEASE_DIR/\$emit.release &&
           $BIN_DIR/lwcc $model --emit=\$emit >$RELEASE_DIR/\$emit.expected &&
           test -s $RELEASE_DIR/\$emit.release &&
           diff $RELEASE_DIR/\$emit.release $RELEASE_DIR/\$emit.expected || exit 1
       done"
  fi
  end_checks release
}

# compiled_at_o3 DIR [TARGET...]: whether DIR's build has LWCC_WERROR on and
# compiled every C++ object (nvcc's aside) with -O3 and -Werror; with
# targets, also whether each of them has objects, all at -O3.
compiled_at_o3() {
  local dir="$1"
  shift
  grep -qx 'LWCC_WERROR:BOOL=ON' "$dir/CMakeCache.txt" 2>/dev/null &&
    python3 - "$dir/compile_commands.json" "$@" <<'PY'
import json, os, sys
try:
    entries = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit(1)
cxx = [e["command"].split() for e in entries
       if os.path.basename(e["command"].split()[0]) != "nvcc"]
# The build type's -O3 and -Werror on every object (a target may add its own
# level after it: the AddressSanitizer fuzz build's -O1, the unit tests'
# LWCC_UNITTEST_OPT).
if not cxx or not all({"-O3", "-Werror"} <= set(words) for words in cxx):
    sys.exit(1)
for target in sys.argv[2:]:  # objects in CMakeFiles/TARGET.dir/, compiled at -O3
    mine = [w for w in cxx if any(f"/CMakeFiles/{target}.dir/" in x for x in w)]
    if not mine or any([x for x in w if x.startswith("-O")][-1] != "-O3" for w in mine):
        sys.exit(f"{target}: no object, or one not at -O3, in {sys.argv[1]}")
PY
}

# ThreadSanitizer: the CPU runtime and the emulated CUDA device's runtime
# built with -fsanitize=thread in build-tsan/, then --gpus 4 CPU and
# emulated CUDA trainers built and run against them (clean), and ones with
# an event wait deleted (a race they must report).
tsan_suite() {
  local targets=(lwcc_runtime_cpu)
  # The emulated device is configured only where the CUDA headers are.
  # shellcheck disable=SC2046 # the launcher flags are words
  if cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DCMAKE_CXX_FLAGS=-fsanitize=thread $(launcher_flags) >/dev/null &&
    ninja -C build-tsan -t query lwcc_runtime_emu >/dev/null 2>&1; then
    targets+=(lwcc_runtime_emu)
  fi
  if ! cmake --build build-tsan -j "$(nproc)" --target "${targets[@]}"; then
    echo "FAIL: the runtimes (${targets[*]}) with -fsanitize=thread build"
    echo "0 passed, 1 failed"
    "${HARNESS[@]}" write tsan 0 1 "$LWCC_TEST_RESULT" \
      "the runtimes (${targets[*]}) with -fsanitize=thread build"
    return 1
  fi
  python3 test/e2e/tsan_trainer.py --prefix build-tsan
}

# With LWCC_TEST_CLANG=1: the C++ parts built with clang++-14 (Release,
# -Werror) in build-clang/, and its unit tests run.
clang_suite() {
  CHECKS_PASSED=0 CHECKS_FAILED=0 CHECKS_FAILING=()
  check "Clang build of lwcc, lwcc-opt, the unit tests and the CPU runtime, -Werror" bash -c \
    "CC=clang-14 CXX=clang++-14 cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Release \
       -DLWCC_WERROR=ON $(launcher_flags | tr '\n' ' ') >/dev/null &&
     cmake --build build-clang -j $(nproc) --target lwcc lwcc-opt lwcc-unittests lwcc_runtime_cpu"
  check "Clang build: unit tests" build-clang/bin/lwcc-unittests --gtest_brief=1
  end_checks clang
}

print_summary() {
  local width=0 i
  for i in "${SUITE_NAMES[@]}"; do
    ((${#i} + 1 > width)) && width=$((${#i} + 1))
  done
  echo
  echo "==== lwcc test summary ===="
  for i in "${!SUITE_NAMES[@]}"; do
    printf '%-*s %s\n' "$width" "${SUITE_NAMES[$i]}:" "${SUITE_RESULTS[$i]}"
  done
  echo "$TOTAL_PASSED passed, $TOTAL_FAILED failed"
}

cmd_test() {
  if ! cmd_build; then
    SUITE_NAMES+=("build")
    SUITE_RESULTS+=("FAILED; no suite ran (counted as 1 failed)")
    TOTAL_FAILED=1
    print_summary
    return 1
  fi
  # The trainers the e2e suites compiled (test/e2e/harness.py's cache: a
  # suite reuses another's identical build) are this run's only.
  rm -rf "$BUILD_DIR/test-cache"

  suite "unit (GoogleTest)" gtest_suite "$BIN_DIR/lwcc-unittests" --gtest_brief=1
  suite "lit (FileCheck)" lit_suite -sv --no-progress-bar test/lit
  suite "streams: 2-4 per device vs one, the verifier on every zoo schedule" python3 test/e2e/streams_trainer.py
  suite "ThreadSanitizer: --gpus 4 CPU and emulated CUDA trainers" tsan_suite
  suite "zoo vs onnxruntime" python3 test/e2e/zoo_reference.py
  suite "exporter patterns"  python3 test/e2e/exporter_patterns.py
  suite "zoo gradients and memory plans" python3 test/e2e/zoo_checks.py
  suite "gradient checks at kinks" python3 test/e2e/gradcheck_kinks.py
  suite "CPU trainer vs interpreter" python3 test/e2e/trainer_vs_reference.py
  suite "bf16 and fp16 mixed precision CPU trainers" python3 test/e2e/mixed_precision.py
  suite "exporter-pattern trainers vs interpreter" python3 test/e2e/exporter_trainers.py
  suite "trainer as a user runs it" python3 test/e2e/trainer_cli.py
  suite "trainers of several source files vs one" python3 test/e2e/split_sources.py
  suite "fused kernels vs one call per op" python3 test/e2e/fused_kernels.py
  suite "the default plan of a batch-norm model vs one device" python3 test/e2e/default_plan.py
  suite "image folders and CIFAR-10" python3 test/e2e/image_data.py
  suite "shared initializers and BN statistics" python3 test/e2e/shared_initializers.py
  suite "CUDA trainers build with nvcc" python3 test/e2e/cuda_build.py
  suite "emulated GPU: its CUDA runtime, cuBLAS, cuDNN and NCCL (GoogleTest)" gtest_suite \
    "$BIN_DIR/lwemu-unittests" --gtest_brief=1
  suite "CUDA trainers on the emulated GPU vs CPU trainers" python3 test/e2e/emulated_gpu.py
  suite "tools/gpu checks on the emulated GPU (build, correct, multi)" \
    python3 test/e2e/gpu_check_emulated.py
  suite "the GPU calibration on the emulated GPU, calibrated device specs" \
    python3 test/e2e/calibration.py
  suite "train-step vs numpy" python3 test/e2e/train_step.py
  suite "training recipes vs PyTorch's steps (recorded)" python3 test/e2e/torch_recipes_replay.py
  suite "training recipes on several devices vs one" python3 test/e2e/recipes_multi_device.py
  suite "fine-tuning with frozen layers" python3 test/e2e/finetune.py
  suite "trainer recipes: --ema, npy data, TensorBoard" python3 test/e2e/trainer_recipes.py
  suite "token data: llm.c shards train a causal LM" python3 test/e2e/token_data.py
  suite "language-model patterns of the exporters vs onnxruntime, the interpreter and the emulated GPU" \
    python3 test/e2e/lm_patterns.py
  suite "attention as one op vs the exporters' plain ops" python3 test/e2e/attention.py
  suite "parallel strategies vs one device" python3 test/e2e/parallel_step.py
  suite "pipelines and micro-batches vs one device" python3 test/e2e/pipeline_step.py
  suite "multi-device CPU trainers vs one device" python3 test/e2e/multi_device_trainer.py
  suite "pipeline CPU trainers vs one device" python3 test/e2e/pipeline_trainer.py
  suite "activation recomputation vs keeping them" python3 test/e2e/recompute_trainer.py
  suite "ZeRO-1, ZeRO-2 and FSDP: sharded data parallelism vs one device" python3 test/e2e/zero_trainer.py
  suite "trainer profile and trace vs the simulator" python3 test/e2e/profile_trace.py
  suite "onnx-node (ONNX node tests)" counted_suite onnx-node python3 test/onnx-node/run_node_tests.py
  suite "Release build (build-release/)" release_suite
  if [[ -n ${LWCC_TEST_CLANG:-} ]]; then
    suite "Clang build (build-clang/)" clang_suite
  fi
  # Its checks time a rank's silence (--peer-timeout): alone, after the rest.
  suite_alone "--gpus 4 CPU trainers as 2 and 4 processes (mpirun)" python3 test/e2e/mpi_trainer.py

  print_summary
  ((TOTAL_FAILED == 0))
}

case "${1:-help}" in
  setup) cmd_setup ;;
  build) cmd_build ;;
  run) cmd_run ;;
  test) cmd_test ;;
  help | -h | --help)
    usage
    exit 2
    ;;
  *)
    echo "dev.sh: unknown command '$1'" >&2
    usage >&2
    exit 2
    ;;
esac
