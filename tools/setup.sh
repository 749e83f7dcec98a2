#!/usr/bin/env bash
# Installs everything lwcc needs on a Debian 12 machine. Idempotent: when all
# dependencies are present it only checks them (well under two seconds).
set -euo pipefail

DEB_PACKAGES=(
  libonnx-dev libprotobuf-dev protobuf-compiler
  llvm-14-dev llvm-14-tools
  libfmt-dev libgtest-dev libopenblas-dev zlib1g-dev
  # oneDNN: the CPU backend's convolutions (its OpenMP runtime is the kernels' pool).
  libdnnl-dev
  # Image folders: JPEG through libjpeg-turbo, PNG through libpng.
  libjpeg62-turbo-dev libpng-dev
  dataset-fashion-mnist libonnx-testdata
  cmake ninja-build g++ clang-format
  # Zoltan's hypergraph partitioner (--strategy=hypergraph) and the MPI it runs on;
  # mpirun runs a trainer as several processes (test/e2e/mpi_trainer.py).
  libtrilinos-zoltan-dev libopenmpi-dev openmpi-bin
  # The compiler's allocator (tools/lwcc/CMakeLists.txt): planning many devices.
  libjemalloc-dev
)
# The optional Clang build suite (LWCC_TEST_CLANG=1 bash tools/dev.sh test).
if [[ -n ${LWCC_TEST_CLANG:-} ]]; then
  DEB_PACKAGES+=(clang-14)
fi
# Pinned to the versions the tests were written against.
# tensorboard: its event-file reader checks the trainer's --tensorboard files.
PY_PACKAGES=(lit==23.1.5 onnx==1.23.2 onnxruntime==1.31.1 numpy==2.4.6 Pillow==13.0.0
  tensorboard==2.21.0)
PY_IMPORTS="import lit, onnx, onnxruntime, numpy, PIL, tensorboard"

# Root runs apt-get directly; otherwise sudo, where it exists.
SUDO=()
if [[ "$(id -u)" -ne 0 ]] && command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
fi

installed=()

# --- Debian packages: one dpkg-query call for all of them.
declare -A deb_ok=()
while IFS='|' read -r pkg state; do
  [[ "$state" == "install ok installed" ]] && deb_ok["$pkg"]=1
done < <(dpkg-query -W -f='${Package}|${Status}\n' "${DEB_PACKAGES[@]}" 2>/dev/null || true)
missing_deb=()
for pkg in "${DEB_PACKAGES[@]}"; do
  [[ -n "${deb_ok[$pkg]:-}" ]] || missing_deb+=("$pkg")
done
if ((${#missing_deb[@]})); then
  echo "setup: installing Debian packages: ${missing_deb[*]}"
  "${SUDO[@]}" apt-get update
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing_deb[@]}"
  installed+=("${missing_deb[@]}")
fi

# --- Python packages for the test tooling.
if ! python3 -c "$PY_IMPORTS" >/dev/null 2>&1; then
  echo "setup: installing Python packages: ${PY_PACKAGES[*]}"
  python3 -m pip install --quiet "${PY_PACKAGES[@]}"
  python3 -c "$PY_IMPORTS"
  installed+=("pip:${PY_PACKAGES[*]}")
fi

# --- CUDA is optional for now; later stages compile trainers with nvcc.
if [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: note: /usr/local/cuda/bin/nvcc not found; CUDA is optional for now"
fi

if ((${#installed[@]})); then
  echo "setup: installed ${installed[*]}"
else
  echo "setup: all dependencies present"
fi
