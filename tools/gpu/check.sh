#!/usr/bin/env bash
# Runs on the GPU machine (device tool) over the build/gpu/ folder that
# tools/gpu/prepare.sh made here (carry build/gpu), the folder it lies in:
#   0. builds every trainer there with nvcc from the sources lwcc emitted,
#      against that machine's cuDNN, cuBLAS and NCCL by their versioned
#      sonames, wherever they are (a toolkit's folders or only pip's wheels:
#      PyTorch's), with the nvcc and compute-sanitizer on PATH or found the
#      same way; the table's first rows name what it used
#   1. correctness: each zoo model's CUDA trainer (TF32 off) runs its first
#      step on the seeded batch; loss, gradients and params vs the CPU backend;
#      with --streams=2 (lenet, resnet18) and --recompute=all (resnet18,
#      inception) too; then three steps with CUDA graphs (recorded at the second, replayed at
#      the third, no capture fallback) vs the CPU backend's three; bf16
#      trainers (--mixed-precision=bf16) vs the CPU backend's bf16 steps
#   2. compute-sanitizer memcheck and racecheck on one LeNet and one ResNet-18 step
#      (float32, and the bf16 trainer where prepare.sh made one)
#   3. speed: AlexNet and ResNet-18, 224x224 batch 128, lwcc (fp32, TF32, bf16; the
#      autotune cache, lwcc's default, and cuDNN's heuristics) vs PyTorch eager and torch.compile
#      (fp32, TF32, bf16 autocast; cudnn.benchmark) in the same run
#   4. harden: the start-up line names the driver, cuDNN and cuBLAS found
#      (the preflight passed); --profile times real steps (ops listed, the
#      profiled run trains as an unprofiled one) with an evaluation pass
#      between epochs, whose new convolution configurations may replace the
#      workspace a recorded step graph uses (the run must match one without
#      CUDA graphs, and stay clean under compute-sanitizer memcheck); and the
#      two runs of AlexNet and ResNet-18 (3 steps; the first timing and
#      writing a new autotune cache, the second reading it) bit-identical; and the
#      fallback to the legacy API when the graph API fails (descriptors
#      refused, every timed engine faulting: LWRT_CONV_GRAPH_FAULT), still
#      agreeing with the CPU
#   5. multi: each --gpus 2 trainer prepare.sh emitted (data-parallel LeNet
#      and ResNet-18, One Weird Trick AlexNet) runs its first step with both
#      logical devices on GPU 0 (--devices=0,0: local copies and sums) and,
#      where the machine has two GPUs or more, on GPUs 0 and 1
#      (--devices=0,1: NCCL); loss, gradients and params vs the CPU
#      backend's --gpus 2 step (compare.py, 1e-3), and compute-sanitizer
#      memcheck and racecheck on the shared-GPU run; with OpenMPI's mpirun
#      there, each one again as 2 processes (mpirun -np 2): on GPUs 0 and 1
#      (NCCL over both processes) vs the CPU's --gpus 2 step, or on a machine
#      of one GPU, both processes given GPU 0 (--devices=0,0), which the
#      trainer must refuse with a message naming the two ranks
# The harden phase's AlexNet and ResNet-18 runs and each multi-device run
# also give a memory row: the trainer's report of what its GPU holds (the
# plan's arena and state, its other buffers, and the rest: the libraries').
# Prints a table. Logs go to $OUT. Convolutions run on cuDNN's graph API
# (the trainers' default) and, for comparison, on its legacy API
# (--cudnn-api=legacy): both are checked against the CPU and timed.
# LWCC_EMULATE_GPU=1 runs the phases on the emulated CUDA device instead
# (runtime/emu; prepare.sh run with LWCC_EMULATE_GPU=1 put its library
# here): the trainers are built with the host compiler (c++) against
# liblwcc_runtime_emu.a, no nvcc, GPU, cuDNN or cuBLAS needed, and the table
# names the device the trainers report. Speed has no meaning there, mpirun's
# processes do not share emulated GPUs and compute-sanitizer cannot run them:
# those rows say so. LWCC_GPU_SCRATCH names the folder for the trainers'
# dumps (default /tmp), LWCC_GPU_JOBS how many trainers build at once
# (default: the cores), LWCC_GPU_TIMEOUT the seconds a trainer may run
# before it counts as hung (default 180; a sanitizer run gets twice that),
# LWCC_GPU_SANITIZE the models compute-sanitizer runs (default "lenet
# resnet18 inception": a step of each of the first two, inception's
# epochs with an evaluation in the harden phase) and LWCC_GPU_TORCH_MODES the PyTorch modes the speed phase
# times (default "eager compile"). Each row is printed as it is found and
# kept in $OUT/rows.txt, the table at the end.
#   bash build/gpu/check.sh [build] [correct] [sanitize] [speed] [harden] [multi]
# runs the phases named (all six when none is): a warm device machine
# keeps the built trainers between calls, so the phases may be split over
# several calls of at most ten minutes each.
set -uo pipefail
PHASES=${*:-build correct sanitize speed harden multi}
want() { [[ " $PHASES " == *" $1 "* ]]; }
# The folder prepare.sh made: this script's own.
G=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-/tmp/lwcc-gpu-out}
# Where the trainers' dumps go (and the speed check's AlexNet).
SCRATCH=${LWCC_GPU_SCRATCH:-/tmp}
# The trainers' autotune cache (--autotune=cache, their default on a GPU):
# one of this check's own, not the user's ~/.cache/lwcc/autotune.tsv.
export LWCC_AUTOTUNE_CACHE=${LWCC_AUTOTUNE_CACHE:-$SCRATCH/lwcc-check-autotune.tsv}
EMU=${LWCC_EMULATE_GPU:-}
[[ $EMU == 0 ]] && EMU=
# Trainers built at once (the emulated build runs the host compiler on
# this machine's cores).
JOBS=${LWCC_GPU_JOBS:-$(nproc)}
mkdir -p "$OUT"
# What this machine has, wherever it is: a CUDA toolkit's folders or only
# pip's nvidia wheels (site-packages/nvidia/*/lib and bin: PyTorch's cuDNN,
# cuBLAS and NCCL, pip's nvcc and compute-sanitizer). Every row of the
# table below used these; the first rows name them.
found() { find / -xdev \( -path /proc -o -path /sys -o -path /tmp \) -prune -o "$@" -print 2>/dev/null; }
libs=
[[ -n $EMU ]] || libs=$(found \( -name 'libcudnn.so.9' -o -name 'libcublas.so.13' -o -name 'libcublasLt.so.13' -o -name 'libnccl.so.2' \) | xargs -r -n1 dirname | sort -u | paste -sd:)
# Every trainer links OpenMPI's libmpi: the machine's, else the copy prepare.sh made.
ldconfig -p | grep -q 'libmpi.so.40 ' || libs="${libs:+$libs:}$(cd "$G/lib/mpi" && pwd)"
export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A tool on PATH, else the first one found (toolkit or wheel).
tool() { command -v "$1" 2>/dev/null || found -type f -name "$1" -perm -u+x | sort | head -1; }
declare -a ROWS
# Each row also goes to stdout and to $OUT/rows.txt as it is found, so a call
# cut off at its time limit still brings back the rows of what ran.
: >"$OUT/rows.txt"
row() {
  ROWS+=("$1")
  printf '%s\n' "$1" | tee -a "$OUT/rows.txt"
}
# A compute-sanitizer run's row: TITLE, its exit RC and its summary from
# LOG (memcheck sums up as "ERROR SUMMARY", racecheck as "RACECHECK
# SUMMARY"); a hazard's or a bad access's row names the kernels it was found
# in (one inside cuDNN's or cuBLAS's own kernels is theirs, not lwcc's).
sanitizer_row() { # TITLE LOG RC
  local summary where
  summary=$(grep -o '\(ERROR\|RACECHECK\) SUMMARY: .*' "$2" | head -1)
  where=$(sed -nE 's/.*(Race reported|Invalid).* at ([A-Za-z0-9_]+).*/\2/p' "$2" | sort -u | head -3 | tr '\n' ' ')
  row "compute-sanitizer $1: exit $3 (${summary:-no summary})${where:+; in: $where}"
}
# memory_row TITLE JSONL: the trainer's report of each GPU's memory after
# training (its log's "memory" records): what cudaMemGetInfo measured in use
# beyond what was in use before the trainer set up, lwcc's plan for the
# logical devices on that GPU (arena, params and optimizer state), the
# trainer's other buffers (the batch), and the rest: the libraries'
# workspaces (cuBLAS's per stream, cuDNN's, NCCL's).
memory_row() { # TITLE JSONL
  local r
  r=$(python3 - "$2" <<'PY' 2>&1
import json, sys
mib = lambda b: "%.1f MiB" % (b / 2**20)
out = []
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type") != "memory":
        continue
    planned = r["arena_bytes"] + r["state_bytes"]
    rest = r["measured_bytes"] - planned - r["other_bytes"]
    out.append("GPU %s (devices %s): measured %s = planned %s + other %s + libraries %s"
               % (r["physical"], ",".join(map(str, r["devices"])), mib(r["measured_bytes"]),
                  mib(planned), mib(r["other_bytes"]), mib(rest)))
print("; ".join(out) or "no memory record")
PY
  )
  row "memory $1: $r"
}
# A trainer that hangs (a collective waiting for a peer, say) is stopped
# after this many seconds and its row says so (exit 124).
LIMIT=${LWCC_GPU_TIMEOUT:-180}
# The models compute-sanitizer runs (see the top).
SANITIZE=${LWCC_GPU_SANITIZE-lenet resnet18 inception}
if [[ -n $EMU ]]; then
  NVCC='' SANITIZER=''
  CXX=${CXX:-c++}
  row "compiler: $CXX ($("$CXX" --version | head -1)) against the emulated CUDA device (liblwcc_runtime_emu.a)"
  row "compute-sanitizer: not used on the emulated device (the sanitizer rows are skipped)"
else
  NVCC=${NVCC:-$(tool nvcc)}
  SANITIZER=${SANITIZER:-$(tool compute-sanitizer)}
  row "nvcc: ${NVCC:-NOT FOUND} ($([[ -n $NVCC ]] && "$NVCC" --version | grep -o 'release [0-9.]*'))"
  row "compute-sanitizer: ${SANITIZER:-not found (the sanitizer rows are skipped)}"
  for l in libcudnn.so.9 libcublas.so.13 libnccl.so.2; do
    where=$(for d in ${libs//:/ }; do [[ -e $d/$l ]] && readlink -f "$d/$l"; done | head -1)
    row "$l: ${where:-NOT FOUND}"
  done
fi
# The GPU's name: nvidia-smi's, else (emulated, or no nvidia-smi) the one a
# trainer names on its first line ("M.onnx on NAME (sm_90, driver ..." or
# "... on GPUs 0,1 (NAME (sm_90, driver ...").
GPU=
if [[ -z $EMU ]] && command -v nvidia-smi >/dev/null; then
  nvidia-smi -L | tee "$OUT/gpu.txt"
  GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
fi
gpu_from_log() {
  [[ -n $GPU ]] || GPU=$(sed -nE 's/.* on (GPUs? [0-9,]+ \()?(.*) \(sm_[0-9]+, driver.*/\2/p' "$1" | head -1)
}
# The GPUs the multi phase may use.
if [[ -n $EMU ]]; then
  ngpu=${LWEMU_DEVICES:-8}
elif command -v nvidia-smi >/dev/null; then
  ngpu=$(nvidia-smi -L | grep -c '^GPU')
else
  ngpu=0
fi
# 0. Build: the sources embed their blobs with .incbin, found from the source folder.
# As lwcc links them: the CUDA runtime static, cuDNN, cuBLAS and NCCL by their
# versioned sonames and RUNPATH (beside the trainer first), lazily bound, and
# the rest of the runtime's link flags (its .libs file: libjpeg, libpng and
# zlib statically, from the archives prepare.sh put beside the runtime).
# shellcheck disable=SC2016 # $ORIGIN is for the linker, not the shell
lflags=(-cudart=static -Xlinker=--enable-new-dtags -Xlinker=-z -Xlinker=lazy '-Xlinker=-rpath=$ORIGIN')
for d in ${libs//:/ }; do lflags+=("-L$d" "-Xlinker=-rpath=$d"); done
rtlibs=()
if [[ -n $EMU ]]; then
  mapfile -t rtlibs <"$G/lib/liblwcc_runtime_emu.libs"
  mapfile -t emucflags <"$G/lib/liblwcc_runtime_emu.cflags"
elif [[ -f $G/lib/liblwcc_runtime_cuda.libs ]]; then
  mapfile -t rtlibs <"$G/lib/liblwcc_runtime_cuda.libs"
fi
build() {
  local src=$1 exe=$2 l flags=()
  if [[ -n $EMU ]]; then
    # As lwcc --emulate-gpu builds a trainer, at -O0 (the kernels are in
    # the library, built optimized).
    (cd "$src" && "$CXX" -std=c++20 -O0 -x c++ -include "$G/include/lwemu/cuda_emu.h" \
      -I"$G/include" "${emucflags[@]}" trainer*.cu -x none "$G/lib/liblwcc_runtime_emu.a" \
      "${rtlibs[@]}" -o "$exe") >"$OUT/build-$(basename "$exe").log" 2>&1
    return
  fi
  for l in "${rtlibs[@]}"; do
    case $l in
      # Every trainer links NCCL, as lwcc links it: a one-GPU trainer with
      # several streams runs through the device group, which calls it.
      # The building machine's libmpi.so by path: this machine's (or prepare.sh's) by soname.
      /*/libmpi.so) flags+=(-l:libmpi.so.40) ;;
      *) flags+=("$l") ;;
    esac
  done
  (cd "$src" && "$NVCC" -std=c++20 -Xcompiler=-Og,-fno-exceptions -arch=sm_90 -I"$G/include" trainer*.cu "$G/lib/liblwcc_runtime_cuda.a" \
    "${lflags[@]}" -L"$G/lib" "${flags[@]}" -o "$exe") \
    >"$OUT/build-$(basename "$exe").log" 2>&1
}
if want build; then
t0=$(date +%s)
for src in "$G"/src/*; do
  while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n; done
  build "$src" "$G/$(basename "$src")-cuda" &
done
wait
row "build: $(ls "$G"/*-cuda 2>/dev/null | wc -l) of $(ls -d "$G"/src/* | wc -l) trainers built with $([[ -n $EMU ]] && echo "$CXX for the emulated device" || echo nvcc) in $(( $(date +%s) - t0 )) s"
fi
want correct && for d in "$G"/*-data; do
  m=$(basename "$d" -data)
  for v in "$m" "$m-s2" "$m-rc" "$m/legacy"; do
  # prepare.sh made no --streams=2 or --recompute=all source
  [[ ($v == *-s2 || $v == *-rc) && ! -d $G/src/$v ]] && continue
  exe="$G/${v%/legacy}-cuda"
  api=graph; [[ $v == */legacy ]] && api=legacy
  [[ -x $exe ]] || { row "correctness $v: NOT BUILT"; continue; }
  log="$OUT/${v/\//-}.log"
  # --profile=1 prints the convolution plans; trainers of several streams have no --profile.
  profile=(--profile=1)
  [[ $v == *-s2 ]] && profile=()
  if timeout "$LIMIT" "$exe" --steps=1 --data="raw:$d" --dump="$SCRATCH/${v/\//-}-gpu" --no-tf32 --cudnn-api=$api \
    "${profile[@]}" --progress=off >"$log" 2>&1; then
    gpu_from_log "$log"
    r=$(python3 "$G/compare.py" "$G/$m-cpu" "$SCRATCH/${v/\//-}-gpu" 2>&1) && s=PASS || s=FAIL
    plans=$(grep -o 'cuDNN convolution plans: .*' "$log")
    r="$r${plans:+; $plans}"
  else
    r="trainer exited $?: $(tail -c 300 "$log")"; s=FAIL
  fi
  row "correctness $v (cuDNN $api API, TF32 off) vs CPU: $s $r"
  done
  # Three steps with CUDA graphs (the second recorded, the third replayed)
  # against the CPU backend's three steps on the same batch.
  exe="$G/$m-cuda"
  [[ -x $exe && -d $G/$m-cpu3 ]] || continue
  log="$OUT/$m-3steps.log"
  if timeout "$LIMIT" "$exe" --steps=3 --data="raw:$d" --dump="$SCRATCH/$m-gpu3" --no-tf32 --progress=off >"$log" 2>&1; then
    r=$(python3 "$G/compare.py" "$G/$m-cpu3" "$SCRATCH/$m-gpu3" 2>&1) && s=PASS || s=FAIL
    if grep -q 'could not be recorded as a CUDA graph' "$log"; then
      s=FAIL r="$r; $(grep -o 'could not be recorded as a CUDA graph.*' "$log" | head -c 300)"
    fi
  else
    r="trainer exited $?: $(tail -c 300 "$log")"; s=FAIL
  fi
  row "correctness $m, 3 steps, CUDA graph replayed (TF32 off) vs CPU: $s $r"
done
# bf16 mixed precision: one step and three (the third replaying the CUDA
# graph) against the CPU backend's bf16 steps, at the learning rate
# prepare.sh gave them (a tenth of the models': see there), within 2e-2: both round the
# same float32 values to bf16, but cuDNN and the CPU sum a convolution in
# different orders, so a value may land on the neighbouring bf16.
want correct && for src in "$G"/src/*-bf16; do
  [[ -d $src ]] || continue # prepare.sh made no bf16 source (LWCC_GPU_BF16="")
  v=$(basename "$src"); m=${v%-bf16}; exe="$G/$v-cuda"
  [[ -x $exe ]] || { row "correctness $v: NOT BUILT"; continue; }
  for n in 1 3; do
    ref="$G/$v-cpu$([[ $n == 3 ]] && echo 3)"; log="$OUT/$v-$n.log"
    if timeout "$LIMIT" "$exe" --steps=$n --lr=0.001 --data="raw:$G/$m-data" --dump="$SCRATCH/$v-gpu$n" --progress=off >"$log" 2>&1; then
      r=$(python3 "$G/compare.py" --tol=2e-2 "$ref" "$SCRATCH/$v-gpu$n" 2>&1) && s=PASS || s=FAIL
    else
      r="trainer exited $?: $(tail -c 300 "$log")"; s=FAIL
    fi
    row "correctness $m bf16, $n step(s) vs the CPU backend's bf16: $s $r"
  done
done
if ! want sanitize; then
  :
elif [[ -n $SANITIZER ]]; then
  for m in $SANITIZE; do
    [[ $m == inception ]] && continue # the harden phase's
    # The bf16 trainer too where there is one: its batch norms run lwcc's
    # own kernels (partial sums over blocks), float32's run cuDNN.
    for v in $m $m-bf16; do
      [[ -x $G/$v-cuda ]] || continue
      for tool in memcheck racecheck; do
        timeout "$((2 * LIMIT))" "$SANITIZER" --tool "$tool" --error-exitcode 9 "$G/$v-cuda" --steps=1 --no-cuda-graph \
          --lr=0.001 --data="raw:$G/$m-data" --progress=off >"$OUT/sanitizer-$v-$tool.log" 2>&1
        sanitizer_row "$tool $v" "$OUT/sanitizer-$v-$tool.log" $?
      done
    done
  done
else
  row "compute-sanitizer: not found"
fi
# Speed: AlexNet and ResNet-18, 224x224, batch 128 (weights regenerated
# here: too big to carry).
if want speed && [[ -n $EMU ]]; then
  row "speed: not measured on the emulated device"
elif want speed; then
rate() { python3 -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; r=[x for x in r if x.get("type")=="step"][10:]; print("%.1f" % (128*len(r)/(sum(x["step_ms"] for x in r)/1000)))' "$1"; }
for net in alexnet resnet18; do
  variants="1 2 1/legacy bf16"
  [[ $net == resnet18 ]] && variants="1 bf16"
  [[ -d $G/src/${net}224-s1 ]] || continue
  python3 "$G/models/gen.py" $net --size 224 --batch 128 --classes 1000 -o "$SCRATCH/${net}224.onnx"
  for s in $variants; do
    exe="$G/${net}224-s${s%/legacy}-cuda"
    api=graph; [[ $s == */legacy ]] && api=legacy
    tag="$net-s${s/\//-}"
    [[ -x $exe ]] || { row "lwcc ${net}224 streams=$s: NOT BUILT"; continue; }
    [[ -f $exe.weights ]] || {
      "$exe" --list-params >"$SCRATCH/${net}224.params"
      python3 "$G/pack_weights.py" "$SCRATCH/${net}224.onnx" "$SCRATCH/${net}224.params" "$exe.weights"
    }
    # PyTorch's runs below time cuDNN's algorithms (cudnn.benchmark); lwcc's
    # default (--autotune=cache) times them at the first run on this GPU and
    # keeps the choices in the autotune cache ($LWCC_AUTOTUNE_CACHE, set
    # below), --autotune=off takes cuDNN's heuristics untimed.
    for flags in --no-tf32 --tf32 "--no-tf32 --autotune=off" "--tf32 --autotune=off"; do
      f=${flags// /}
      # shellcheck disable=SC2086 # the flags split into words
      timeout "$LIMIT" "$exe" --steps=70 $flags --cudnn-api=$api --progress=off --log="$OUT/$tag$f.jsonl" \
        >"$OUT/$tag$f.log" 2>&1 \
        && row "lwcc ${net}224 b128 streams=$s $flags: $(rate "$OUT/$tag$f.jsonl") img/s" \
        || row "lwcc ${net}224 b128 streams=$s $flags: FAILED $(tail -c 300 "$OUT/$tag$f.log")"
    done
  done
  for api in graph legacy bf16; do
    exe="$G/${net}224-s1-cuda" flags=(--cudnn-api=$api) what="fp32, cuDNN $api API"
    [[ $api == bf16 ]] && exe="$G/${net}224-sbf16-cuda" flags=() what="bf16, cuDNN graph API"
    [[ -x $exe ]] || continue
    timeout "$LIMIT" "$exe" --steps=12 --profile=10 "${flags[@]}" --progress=off \
      >"$OUT/$net-profile-$api.txt" 2>&1
    row "per-op profile of lwcc ${net}224 ($what): $OUT/$net-profile-$api.txt"
  done
  for mode in ${LWCC_GPU_TORCH_MODES-eager compile}; do
    for tf in 0 1 bf16; do
      r=$(python3 "$G/torch_bench.py" $mode $tf 128 224 $net 2>"$OUT/torch-$net-$mode-$tf.err" |
        sed -n 's/img_per_s //p')
      label="tf32=$tf"; [[ $tf == bf16 ]] && label="bf16 autocast"
      row "pytorch $mode $label ${net}224 b128: ${r:-FAILED} img/s"
    done
  done
done
fi
if want harden; then
  pass() { [[ $1 == 0 ]] && echo PASS || echo FAIL; }
  # The preflight passed and the start-up line names what it found.
  log="$OUT/harden-start.log"
  timeout "$LIMIT" "$G/lenet-cuda" --steps=1 --data="raw:$G/lenet-data" --progress=off >"$log" 2>&1
  gpu_from_log "$log"
  line=$(grep -o '(sm_[0-9]*, driver CUDA [0-9.]*, cuDNN [0-9.]*, cuBLAS [0-9.]*)' "$log")
  row "preflight line: $([[ -n $line ]] && echo "PASS $line" || echo "FAIL $(tail -c 300 "$log")")"
  # --profile with an evaluation pass between two epochs: the profiled steps
  # run their ops (listed, timed), the step graph recorded in epoch 1 is
  # replayed after the evaluation's new configurations, and the result
  # matches a run without CUDA graphs.
  for m in lenet inception; do
    common=(--data=synthetic --synthetic-batches=5 --epochs=2 --eval --progress=off --no-tf32)
    timeout "$LIMIT" "$G/$m-cuda" "${common[@]}" --profile=3 --dump="$SCRATCH/$m-prof" >"$OUT/harden-profile-$m.log" 2>&1
    rc=$?
    timeout "$LIMIT" "$G/$m-cuda" "${common[@]}" --no-cuda-graph --dump="$SCRATCH/$m-direct" \
      >"$OUT/harden-direct-$m.log" 2>&1
    prof=$(sed -nE 's/^profile: 3 steps on .*, ([0-9.]+) ms per step in ([0-9]+) ops$/\1 ms\/step, \2 ops/p' \
      "$OUT/harden-profile-$m.log")
    ops=${prof##*, }; ops=${ops% ops}
    r=$(python3 "$G/compare.py" "$SCRATCH/$m-direct" "$SCRATCH/$m-prof" 2>&1)
    ok=$([[ $rc == 0 && ${ops:-0} -ge 10 ]] && python3 "$G/compare.py" "$SCRATCH/$m-direct" \
      "$SCRATCH/$m-prof" >/dev/null 2>&1 && echo 0 || echo 1)
    row "--profile=3 $m, 2 epochs with eval: $(pass "$ok") (${prof:-no profile line}; vs --no-cuda-graph: $r)"
  done
  if [[ -n $SANITIZER && " $SANITIZE " == *" inception "* ]]; then
    timeout "$((2 * LIMIT))" "$SANITIZER" --tool memcheck --error-exitcode 9 "$G/inception-cuda" --data=synthetic \
      --synthetic-batches=3 --epochs=2 --eval --progress=off >"$OUT/sanitizer-inception-eval.log" 2>&1
    row "compute-sanitizer memcheck inception, graphs replayed after eval: $(pass $?)"
  fi
  # Two runs of a trainer compute the same bits: the first times each
  # convolution's candidates and writes a new autotune cache, the second
  # reads every choice from it and times none (TF32 convolutions, the
  # default, and the CUDA graph recorded at step 2 and replayed at step 3).
  for m in alexnet resnet18; do
    [[ -x $G/$m-cuda ]] || continue
    rcs= cache="$SCRATCH/autotune-$m.tsv"
    rm -f "$cache"
    for i in 1 2; do
      timeout "$LIMIT" "$G/$m-cuda" --steps=3 --data="raw:$G/$m-data" --dump="$SCRATCH/$m-det$i" \
        --autotune=cache --autotune-cache="$cache" \
        --progress=off --log="$OUT/harden-det-$m-$i.jsonl" >"$OUT/harden-det-$m-$i.log" 2>&1
      rcs="$rcs $?"
    done
    memory_row "$m, one GPU" "$OUT/harden-det-$m-1.jsonl"
    diff -rq "$SCRATCH/$m-det1" "$SCRATCH/$m-det2" >"$OUT/harden-det-$m.diff" 2>&1
    timed=$(grep -o 'autotune: [0-9]* choices' "$OUT/harden-det-$m-1.log")
    retimed=$(grep -c 'autotune: [0-9]* choices' "$OUT/harden-det-$m-2.log")
    ok=$([[ $rcs == " 0 0" && ! -s $OUT/harden-det-$m.diff && -n $timed && $retimed == 0 ]] &&
      echo 0 || echo 1)
    row "two runs of $m with the autotune cache, 3 steps: $(pass "$ok") (exits$rcs; first run ${timed:-timed nothing}, the second none; $(grep -c . "$OUT/harden-det-$m.diff") files differ)"
  done
  # The fallback to the legacy API when the graph API fails.
  for fault in describe time; do
    for m in lenet resnet18; do
      if [[ $fault == time && -n $EMU ]]; then
        row "graph API failing (time) $m: not run, the emulated graph API offers no engine to time"
        continue
      fi
      log="$OUT/harden-fault-$fault-$m.log"
      LWRT_CONV_GRAPH_FAULT=$fault timeout "$LIMIT" "$G/$m-cuda" --steps=1 --data="raw:$G/$m-data" --no-tf32 \
        --dump="$SCRATCH/$m-fault-$fault" --profile=1 --progress=off >"$log" 2>&1
      rc=$?
      r=$(python3 "$G/compare.py" "$G/$m-cpu" "$SCRATCH/$m-fault-$fault" 2>&1)
      ok=$([[ $rc == 0 ]] && grep -q ' 0 on the graph API.*after the graph API failed' "$log" &&
        python3 "$G/compare.py" "$G/$m-cpu" "$SCRATCH/$m-fault-$fault" >/dev/null 2>&1 && echo 0 || echo 1)
      row "graph API failing ($fault) $m: $(pass "$ok") exit $rc, $r; $(grep -o 'cuDNN convolution plans: .*' "$log" | head -c 200)"
    done
  done
fi
# multi_step WHAT DUMP NOTE CMD...: runs CMD (WHAT: the trainer, or mpirun
# running it; it dumps the --gpus 2 step of $v to DUMP) into $log, and sets
# s (PASS when CMD exits 0 and DUMP is the CPU's --gpus 2 step) and r
# (compare.py's verdict and the first match of the grep -o pattern NOTE in
# $log; else CMD's exit status and the log's tail). Returns CMD's status.
multi_step() {
  local what=$1 dump=$2 note=$3 rc=0
  shift 3
  if timeout "$LIMIT" "$@" >"$log" 2>&1; then
    r=$(python3 "$G/compare.py" "$G/$v-cpu" "$dump" 2>&1) && s=PASS || s=FAIL
    r="$r; $(grep -o "$note" "$log" | head -1)"
  else
    rc=$?
    r="$what exited $rc: $(tail -c 300 "$log")"; s=FAIL
  fi
  return "$rc"
}
if want multi; then
  maps="0,0"
  (( ngpu >= 2 )) && maps="0,0 0,1"
  for src in "$G"/src/*-g2-*; do
    [[ -d $src ]] || continue
    v=$(basename "$src") # model-g2-strategy
    m=${v%%-g2-*}
    exe="$G/$v-cuda"
    [[ -x $exe ]] || { row "multi-device $v: NOT BUILT"; continue; }
    for devs in $maps; do
      log="$OUT/$v-devices-${devs/,/-}.log"
      dump="$SCRATCH/$v-devices-${devs/,/-}"
      multi_step trainer "$dump" 'NCCL between [0-9]* GPUs\|logical devices [0-9,]* share GPU [0-9]*' \
        "$exe" --steps=1 --data="raw:$G/$m-data" --dump="$dump" --no-tf32 --devices="$devs" \
        --progress=off --log="$log.jsonl" && gpu_from_log "$log"
      row "multi-device $v --devices=$devs (TF32 off) vs CPU --gpus 2: $s $r"
      memory_row "$v --devices=$devs" "$log.jsonl"
    done
    if [[ -n $SANITIZER && " $SANITIZE " == *" $m "* ]]; then
      for tool in memcheck racecheck; do
        timeout "$((2 * LIMIT))" "$SANITIZER" --tool "$tool" --error-exitcode 9 "$exe" --steps=1 --devices=0,0 \
          --data="raw:$G/$m-data" --progress=off >"$OUT/sanitizer-$v-$tool.log" 2>&1
        sanitizer_row "$tool $v --devices=0,0" "$OUT/sanitizer-$v-$tool.log" $?
      done
    fi
  done
  (( ngpu >= 2 )) || row "multi-device on distinct GPUs (NCCL): not run, $ngpu GPU on this machine"
  # As 2 processes under mpirun: NCCL over both, or the refusal of one GPU for two.
  if [[ -n $EMU ]]; then
    row "multi-device as 2 processes: not run, each process would have emulated GPUs of its own"
  elif command -v mpirun >/dev/null; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    for src in "$G"/src/*-g2-*; do
      [[ -d $src ]] || continue
      v=$(basename "$src"); m=${v%%-g2-*}; exe="$G/$v-cuda"
      [[ -x $exe ]] || continue
      log="$OUT/$v-mpirun.log"
      if (( ngpu >= 2 )); then
        multi_step mpirun "$SCRATCH/$v-mpirun" 'NCCL between the [0-9]* GPUs of [0-9]* processes' \
          mpirun -np 2 "$exe" --steps=1 --data="raw:$G/$m-data" --dump="$SCRATCH/$v-mpirun" --no-tf32 \
          --progress=off
        row "multi-device $v as 2 processes (mpirun -np 2, GPUs 0 and 1) vs CPU --gpus 2: $s $r"
      else
        timeout "$LIMIT" mpirun -np 2 "$exe" --steps=1 --data="raw:$G/$m-data" --devices=0,0 --progress=off \
          >"$log" 2>&1
        rc=$?
        grep -q 'ranks 0 and 1 both drive GPU 0' "$log" && (( rc == 1 )) && s=PASS || s=FAIL
        row "multi-device $v as 2 processes on one GPU (--devices=0,0): $s, exit $rc, $(grep -o 'ranks 0 and 1 both drive GPU 0[^:]*' "$log" | head -1)"
      fi
    done
  else
    row "multi-device as 2 processes: not run, no mpirun (OpenMPI) on this machine"
  fi
fi
# No trainer named its GPU (none ran): any log of this run that does.
if [[ -z $GPU ]]; then
  for l in "$OUT"/*.log; do
    [[ -f $l ]] && gpu_from_log "$l"
    [[ -n $GPU ]] && break
  done
fi
{
  echo "==== lwcc GPU checks on ${GPU:-an unknown GPU} ===="
  printf '%s\n' "${ROWS[@]}"
} | tee "$OUT/summary.txt"
