#!/usr/bin/env bash
# Shared set-up for scripts/run.sh and scripts/test.sh: installs the Debian packages
# that are missing (apt-get update first), then configures (once) and builds
# incrementally in build/. Safe to run again; does nothing that is already done.
set -euo pipefail

DPB_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DPB_BUILD="${DPB_BUILD:-$DPB_ROOT/build}"

DPB_PACKAGES=(
  build-essential cmake ninja-build git pkg-config
  libdnnl-dev libgloo-dev nlohmann-json3-dev libfmt-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev zlib1g-dev dataset-fashion-mnist
  libsimdjson-dev  # streaming reads of PyTorch profiler traces
  ocl-icd-opencl-dev  # Debian's oneDNN CMake package requires the OpenCL headers and loader
  ${DPB_EXTRA_PACKAGES:-}
)

dpb_install_missing() {
  local missing=()
  for p in "${DPB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "setup: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# Configures $DPB_BUILD once (with $DPB_CMAKE_ARGS), then builds the named targets (all
# when none are named).
dpb_build_targets() {
  if [ ! -f "$DPB_BUILD/build.ninja" ]; then
    cmake -S "$DPB_ROOT" -B "$DPB_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release ${DPB_CMAKE_ARGS:-} >&2
  fi
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  # Two cores and CUDA/oneDNN headers: keep parallel compiles within memory.
  cmake --build "$DPB_BUILD" --parallel "${DPB_JOBS:-$(nproc)}" "${targets[@]}" >&2
}
dpb_build() { dpb_build_targets; }

dpb_install_missing
# Scripts that build elsewhere (scripts/fuzz.sh) set DPB_SETUP_NO_BUILD=1.
[ "${DPB_SETUP_NO_BUILD:-0}" = "1" ] || dpb_build
