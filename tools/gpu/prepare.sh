#!/usr/bin/env bash
# Prepares, on this (GPU-less) machine, everything tools/gpu/check.sh needs
# on the GPU machine, in build/gpu/ (about 70 MiB: a device tool that
# carries less takes a folder of fewer models, LWCC_GPU_MODELS below, or
# build/gpu less the dyn* patterns and vgg11, 56 MiB): the CUDA runtime library and headers, the sources lwcc emits for
# each trainer (built there with nvcc against that machine's cuDNN and
# cuBLAS), and for every zoo model at test size a seeded batch and the CPU
# backend's first step on it (loss, gradients, updated params) and its
# params and last outputs after three steps on it; the same
# for the dynamo exporter's layer_norm / gather_nd patterns, and for the
# --gpus 2 trainers of MULTI (sources and the CPU backend's --gpus 2 step),
# and OpenMPI's library with its dependencies (lib/mpi/: every trainer links
# libmpi.so.40, which a GPU machine without OpenMPI lacks), and the static
# archives of libjpeg, libpng and zlib that CUDA trainers link (lib/).
#
#   bash tools/gpu/prepare.sh      (after bash tools/dev.sh build)
#
# LWCC_EMULATE_GPU=1 prepares for `LWCC_EMULATE_GPU=1 bash build/gpu/check.sh`
# on this machine instead: the emulated CUDA device's library
# (liblwcc_runtime_emu.a) goes beside the CUDA runtime's, which may then be
# absent (a machine without nvcc). LWCC_GPU_MODELS="lenet ..." prepares
# those zoo models alone (and none of the exporter patterns or the speed
# check's AlexNet and ResNet-18); LWCC_GPU_MULTI and LWCC_GPU_BF16 replace the lists below
# (empty: none). LWCC_GPU_OUT names another folder than build/gpu, and
# LWCC_BIN_DIR another build's bin/ than build/bin (its lib/ beside it).
# LWCC_GPU_RUNTIME_ONLY=1 stops after the scripts, runtime and libraries
# (no models): tools/gpu/calibrate.py prepares its trainers' folder so.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${LWCC_BIN_DIR:-build/bin}
BUILD=$(dirname "$BIN")
LWCC=$BIN/lwcc
OUT=${LWCC_GPU_OUT:-build/gpu}
rm -rf "$OUT"
mkdir -p "$OUT/src" "$OUT/lib"
cp tools/gpu/check.sh tools/gpu/compare.py tools/gpu/pack_weights.py tools/gpu/torch_bench.py \
  tools/gpu/calibrate.py "$OUT/"
cp -r tools/models "$OUT/models"
cp -r "$BUILD/include" "$OUT/include"
EMU=${LWCC_EMULATE_GPU:-}
[[ $EMU == 0 ]] && EMU=
if [[ -z $EMU || -f "$BUILD"/lib/liblwcc_runtime_cuda.a ]]; then
  cp "$BUILD"/lib/liblwcc_runtime_cuda.a "$BUILD"/lib/liblwcc_runtime_cuda.libs "$OUT/lib/"
  strip -g "$OUT/lib/liblwcc_runtime_cuda.a"
fi
if [[ -n $EMU ]]; then
  cp "$BUILD"/lib/liblwcc_runtime_emu.a "$BUILD"/lib/liblwcc_runtime_emu.libs \
    "$BUILD"/lib/liblwcc_runtime_emu.cflags "$OUT/lib/"
  strip -g "$OUT/lib/liblwcc_runtime_emu.a"
fi
mkdir -p "$OUT/lib/mpi"
mpi=$(ldconfig -p | sed -n 's/.*libmpi.so.40 .*=> //p' | head -1)
cp -L "$mpi" "$OUT/lib/mpi/"
ldd "$mpi" | awk '/=> \// {print $3}' | grep -v -E '/lib(c|m|dl|pthread|rt|z)\.so' |
  xargs -r -I{} cp -L {} "$OUT/lib/mpi/"
# The static archives the runtime's link flags name (libjpeg, libpng, zlib):
# the GPU machine links them from here, needing none of them installed.
for a in $(sed -n 's/^-l:\(lib.*\.a\)$/\1/p' "$OUT"/lib/*.libs | sort -u); do
  cp "$(gcc -print-file-name="$a")" "$OUT/lib/"
done
if [[ -n ${LWCC_GPU_RUNTIME_ONLY:-} ]]; then
  du -sh "$OUT"
  exit 0
fi
# with_batch ARGS... <<'PY': runs the Python on stdin, ARGS its sys.argv[1:]
# (it imports os, numpy as np and onnx, and sets `model`, its `name` and the
# folder `out`), then in the same process saves the model as out/NAME.onnx and
# a seeded batch of its input and labels in out/NAME-data/ (input_0.bin,
# input_1.bin).
with_batch() {
  {
    cat
    cat <<'PY'
onnx.save(model, os.path.join(out, name + ".onnx"))
dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
classes = model.graph.output[0].type.tensor_type.shape.dim[1].dim_value
rng = np.random.default_rng(11)
os.makedirs(os.path.join(out, name + "-data"), exist_ok=True)
rng.standard_normal(dims).astype(np.float32).tofile(os.path.join(out, name + "-data", "input_0.bin"))
rng.integers(0, classes, size=dims[0]).astype(np.int64).tofile(os.path.join(out, name + "-data", "input_1.bin"))
PY
  } | python3 - "$@"
}
# Multi-device trainers checked on the GPU: model:strategy, --gpus 2 (the
# pipeline: 2 stages of 2 micro-batches, lenet has no batch norm, so its step
# is the one-device step up to rounding; zero1: data parallelism with the
# optimizer state sharded, --shard=zero1; fsdp: the params sharded too,
# gathered for each layer, --shard=fsdp; zero2: ZeRO-1 with each gradient
# freed after its reduce-scatter, --shard=zero2).
MULTI=${LWCC_GPU_MULTI-lenet:data resnet18:data alexnet_owt:owt lenet:pipeline resnet18:zero1 resnet18:zero2 resnet18:fsdp}
# Models checked in bf16 (conv2d, gemm and their gradients on cuDNN and
# cuBLAS in 16 bits, casts, batch norm in float32).
BF16=${LWCC_GPU_BF16-lenet alexnet resnet18}
# Every zoo model, and upnet (the activations, max/min, resize and stateless
# batch norm of the model-collection ops: their CUDA kernels against the CPU's).
names=${LWCC_GPU_MODELS:-$(python3 -c 'import sys; sys.path.insert(0, "tools/models"); import zoo; print(" ".join(list(zoo.REGISTRY) + ["upnet"]))')}
for m in $names; do
  with_batch "$m" "$OUT" <<'PY'
import os, sys
import numpy as np
import onnx
sys.path.insert(0, "tools/models")
import zoo
name, out = sys.argv[1], sys.argv[2]
model = zoo.build(name, test_size=True)
PY
  echo "+ $m: CUDA sources and the CPU reference step"
  "$LWCC" "$OUT/$m.onnx" --emit=source -o "$OUT/src/$m"
  if [[ $m == lenet || $m == resnet18 ]]; then
    "$LWCC" "$OUT/$m.onnx" --emit=source --streams=2 -o "$OUT/src/$m-s2"
  fi
  # Activation recomputation (--recompute=all): the same step as the CPU's
  # without it, the batch norms and ReLUs computed again in the backward.
  if [[ $m == resnet18 || $m == inception ]]; then
    "$LWCC" "$OUT/$m.onnx" --emit=source --recompute=all -o "$OUT/src/$m-rc"
  fi
  "$LWCC" "$OUT/$m.onnx" --target=cpu -o "$OUT/$m-cpu-trainer"
  "$OUT/$m-cpu-trainer" --steps=1 --data="raw:$OUT/$m-data" --dump="$OUT/$m-cpu" --progress=off >/dev/null
  # Three steps on the same batch: the GPU trainer's second step is recorded
  # as a CUDA graph and its third replays it.
  "$OUT/$m-cpu-trainer" --steps=3 --data="raw:$OUT/$m-data" --dump="$OUT/$m-cpu3" --progress=off >/dev/null
  # bf16 mixed precision: the CUDA trainer's first step and three steps
  # (the third a replayed CUDA graph) against the CPU backend's bf16 steps.
  if [[ " $BF16 " == *" $m "* ]]; then
    echo "+ $m-bf16: --mixed-precision=bf16 CUDA sources and the CPU backend's bf16 steps"
    "$LWCC" "$OUT/$m.onnx" --emit=source --mixed-precision=bf16 -o "$OUT/src/$m-bf16"
    "$LWCC" "$OUT/$m.onnx" --target=cpu --mixed-precision=bf16 -o "$OUT/$m-bf16-cpu-trainer"
    # At a tenth of the models' learning rate: at theirs, test-size AlexNet's
    # loss climbs (10 to 14 in three steps) and two bf16 steps that differ
    # only in the order of their sums drift 20-fold apart in three steps
    # (the CPU's --gpus 1 against its --gpus 2: 1.3e-3 to 2.3e-2).
    for n in 1 3; do
      "$OUT/$m-bf16-cpu-trainer" --steps=$n --lr=0.001 --data="raw:$OUT/$m-data" \
        --dump="$OUT/$m-bf16-cpu$([[ $n == 3 ]] && echo 3)" --progress=off >/dev/null
    done
    rm -f "$OUT/$m-bf16-cpu-trainer"
  fi
  for spec in $MULTI; do
    [[ ${spec%%:*} == "$m" ]] || continue
    v="$m-g2-${spec##*:}"
    flags=(--gpus=2 --strategy="${spec##*:}")
    [[ ${spec##*:} == pipeline ]] && flags+=(--stages=2 --microbatches=2)
    [[ ${spec##*:} == zero[12] || ${spec##*:} == fsdp ]] &&
      flags=(--gpus=2 --strategy=data --shard="${spec##*:}")
    echo "+ $v: --gpus 2 CUDA sources and the CPU backend's --gpus 2 step"
    "$LWCC" "$OUT/$m.onnx" --emit=source "${flags[@]}" -o "$OUT/src/$v"
    "$LWCC" "$OUT/$m.onnx" --target=cpu "${flags[@]}" -o "$OUT/$v-cpu-trainer"
    "$OUT/$v-cpu-trainer" --steps=1 --data="raw:$OUT/$m-data" --dump="$OUT/$v-cpu" --progress=off \
      >/dev/null
    # The reference's params after the step against the single-device one's.
    echo "  CPU --gpus 2 vs --gpus 1 params: $(python3 tools/gpu/compare.py --params-only \
      "$OUT/$m-cpu" "$OUT/$v-cpu" 2>&1)"
    rm -f "$OUT/$v-cpu-trainer"
  done
  rm -f "$OUT/$m-cpu-trainer" "$OUT/$m.onnx"
done
# The dynamo exporter's patterns that need layer_norm, erf and gather_nd
# (test/e2e/dynamo_graphs.py), static batch 2, with the same CPU step.
[[ -n ${LWCC_GPU_MODELS:-} ]] || for label in "dyn20/alexnet@64 pool 1->6 GatherND+ReduceMean" "dyn20/vgg11@64 pool 2->7 GatherND+Where" \
             "dyn20/convnext Gelu" "dyn18/convnext Erf"; do
  m=$(echo "$label" | cut -d' ' -f1,2 | tr -c 'A-Za-z0-9\n' '-')
  with_batch "$label" "$OUT" "$m" <<'PY'
import os, sys
import numpy as np
import onnx
sys.path.insert(0, "test/e2e")
import exporter_patterns as ep
label, out, name = sys.argv[1:4]
c = dict({c["label"]: c for c in ep.CASES}[label], sym=False)
model = ep.build(c)
PY
  echo "+ $m ($label): CUDA sources and the CPU reference step"
  "$LWCC" "$OUT/$m.onnx" --emit=source -o "$OUT/src/$m"
  "$LWCC" "$OUT/$m.onnx" --target=cpu -o "$OUT/$m-cpu-trainer"
  "$OUT/$m-cpu-trainer" --steps=1 --data="raw:$OUT/$m-data" --dump="$OUT/$m-cpu" --progress=off >/dev/null
  rm -f "$OUT/$m-cpu-trainer" "$OUT/$m.onnx"
done
# The speed check's AlexNet (one and two streams, bf16) and ResNet-18 (one
# stream, bf16).
if [[ -z ${LWCC_GPU_MODELS:-} ]]; then
  for net in alexnet resnet18; do
    echo "+ $net 224x224, batch 128: CUDA sources without embedded weights"
    python3 tools/models/gen.py $net --size 224 --batch 128 --classes 1000 -o "$OUT/${net}224.onnx"
    variants="1 2 bf16"
    [[ $net == resnet18 ]] && variants="1 bf16"
    for s in $variants; do
      flags=("--streams=$s")
      [[ $s == bf16 ]] && flags=(--mixed-precision=bf16)
      "$LWCC" "$OUT/${net}224.onnx" --weights=separate "${flags[@]}" --emit=source \
        -o "$OUT/src/${net}224-s$s"
      rm -f "$OUT/src/${net}224-s$s/trainer.weights" # AlexNet's: 244 MB: check.sh packs them there
    done
    rm -f "$OUT/${net}224.onnx"
  done
fi
du -sh "$OUT"
