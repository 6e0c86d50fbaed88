#!/usr/bin/env bash
# Packages the built binaries so they run on another Linux x86-64 machine that has a
# GPU, its driver and the CUDA libraries (cudart, cuBLAS, cuDNN 9, NCCL 2) but not the
# Debian packages this project builds against (oneDNN, Gloo, fmt, ...).
#
#   scripts/package.sh [BUILD_DIR] [DEST]      # default: build/ -> dist/dpbench/
#   scp -r dist/dpbench gpu-host:
#   gpu-host$ dpbench/run dpbench --devices=cuda --model=resnet18 --batch=256
#   gpu-host$ dpbench/run test_cuda
#
# DPB_PACKAGE_ONLY="dpbench test_cuda" packages only those executables (smaller).
# DEST/bin holds the executables, DEST/lib the shared libraries they need that are not
# part of the C/C++ runtime or of CUDA (those come from the target machine), DEST/run
# finds the target's CUDA, cuDNN and NCCL libraries (ldconfig, /usr/local/cuda, the
# nvidia-* Python wheels PyTorch installs, or DPB_CUDA_LIBS) and runs a binary.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
DEST="${2:-$ROOT/dist/dpbench}"

[ -d "$BUILD" ] || { echo "package: no build directory '$BUILD' (run scripts/test.sh or cmake first)" >&2; exit 2; }

mapfile -t bins < <(find "$BUILD/benchmarks" "$BUILD/diagnostics" "$BUILD/reports" "$BUILD/tests" \
                      -maxdepth 3 -type f -perm -u+x ! -name '*.so*' ! -name '*.sh' 2>/dev/null |
                    while read -r f; do file -b "$f" | grep -q '^ELF' && echo "$f"; done)
if [ -n "${DPB_PACKAGE_ONLY:-}" ]; then
  wanted=()
  for b in "${bins[@]}"; do
    for w in $DPB_PACKAGE_ONLY; do [ "$(basename "$b")" = "$w" ] && wanted+=("$b"); done
  done
  bins=("${wanted[@]}")
fi
[ ${#bins[@]} -gt 0 ] || { echo "package: no executables under '$BUILD'" >&2; exit 2; }

rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp/bin" "$DEST.tmp/lib" "$DEST.tmp/share"

# Libraries the target provides itself: the C/C++ runtime, the driver and CUDA's own.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcublas|libcublasLt|libcudnn|libnccl|libnvrtc|libnvJitLink|libcupti|libnvToolsExt|libnvtx)'
for b in "${bins[@]}"; do
  cp "$b" "$DEST.tmp/bin/"
  strip --strip-unneeded "$DEST.tmp/bin/$(basename "$b")"
  ldd "$b" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    if [ ! -e "$DEST.tmp/lib/$name" ]; then
      cp -L "$path" "$DEST.tmp/lib/$name"
      strip --strip-unneeded "$DEST.tmp/lib/$name" 2>/dev/null || true
    fi
  done
done
cp -r "$ROOT/reports/schema" "$DEST.tmp/share/"

cat > "$DEST.tmp/run" <<'EOF'
#!/usr/bin/env bash
# Runs a packaged dpbench binary with this package's libraries and the machine's CUDA ones.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
[ $# -ge 1 ] || { echo "usage: $0 BINARY [ARGS...]  (binaries: $(ls "$here/bin" | tr '\n' ' '))" >&2; exit 2; }
dirs=("$here/lib")
[ -n "${DPB_CUDA_LIBS:-}" ] && IFS=: read -r -a extra <<< "$DPB_CUDA_LIBS" && dirs+=("${extra[@]}")
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  found=""
  for d in "${dirs[@]}"; do [ -e "$d/$lib" ] && found=1 && break; done
  [ -n "$found" ] && continue
  path="$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')"
  if [ -z "$path" ]; then
    for root in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu \
                /opt /usr/local/lib /usr/lib/python3*; do
      [ -d "$root" ] || continue
      path="$(find -L "$root" -maxdepth 8 -name "$lib" -print -quit 2>/dev/null || true)"
      [ -n "$path" ] && break
    done
  fi
  if [ -z "$path" ]; then
    echo "run: $lib not found on this machine (install CUDA 13, cuDNN 9 and NCCL 2, or set DPB_CUDA_LIBS)" >&2
    exit 2
  fi
  dirs+=("$(dirname "$path")")
done
ld="$(IFS=:; echo "${dirs[*]}")"
export LD_LIBRARY_PATH="$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DPBENCH_BIN="${DPBENCH_BIN:-$here/bin/dpbench}"
bin="$1"; shift
[ -x "$here/bin/$bin" ] || { echo "run: no binary '$bin' in $here/bin" >&2; exit 2; }
exec "$here/bin/$bin" "$@"
EOF
chmod +x "$DEST.tmp/run"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "package: $(ls "$DEST/bin" | wc -l) binaries, $(ls "$DEST/lib" | wc -l) libraries, $(du -sh "$DEST" | cut -f1) in $DEST" >&2
