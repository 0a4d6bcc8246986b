#!/usr/bin/env bash
# The CuTe DSL and TileLang wheels for a GPU machine without internet whose Python already has
# torch, numpy and Triton (Python 3.12, x86_64 Linux), packed to travel in parts:
#
#   scripts/dsl-wheels.sh OUTDIR [PART_BYTES]
#
# DSLS="tilelang" (or "cute-dsl") fetches one DSL's set only: fewer parts to carry when the other
# is already there or not wanted (default: both).
#
# leaves OUTDIR/part.aa, part.ab, ... (PART_BYTES each, default 37 MB) and OUTDIR/dsl.sha256.
# On the GPU machine: `cat part.* | xz -dc | tar xf - -C DIR`, then `DSL_SITE=DIR/dslsite
# scripts/gpu-run.sh OUT dsl` (it puts the folder on PYTHONPATH, the CUTLASS DSL's own packages
# first, since a wheel's .pth file is not read from PYTHONPATH).
#
# The pins are the DSLs' own requirements, resolved by hand because torch (one of TileLang's)
# must not be downloaded: tilelang 0.1.15 asks for apache-tvm-ffi >=0.1.11,<0.1.13 (a newer one
# fails its import with "'tl.SwizzleMode' has no enum at string index 'NONE'") and z3-solver
# >=4.13,<4.15.5 (a 5.x one has no libz3.so.4.15).
set -euo pipefail
OUT=$(realpath -m "${1:?OUTDIR}")
PART=${2:-37000000}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT" "$WORK/wheels" "$WORK/dslsite"
DSLS=${DSLS:-cute-dsl tilelang}
wanted=("ml-dtypes>=0.5.1" cloudpickle cuda-bindings cuda-pathfinder protobuf psutil tqdm "typing-extensions>=4.10")
for dsl in $DSLS; do
  case "$dsl" in
    cute-dsl) wanted+=("nvidia-cutlass-dsl==4.8.1" "nvidia-cutlass-dsl-libs-base==4.8.1"
                       "nvidia-cutlass-dsl-libs-core==4.8.1" "nvidia-cutlass-dsl-libs-cu13==4.8.1") ;;
    tilelang) wanted+=("tilelang==0.1.15" "apache-tvm-ffi==0.1.12" "z3-solver==4.15.4.0" torch-c-dlpack-ext) ;;
    *) echo "DSLS: unknown DSL '$dsl' (cute-dsl or tilelang)" >&2; exit 2 ;;
  esac
done
pip download --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d "$WORK/wheels" "${wanted[@]}"
for w in "$WORK"/wheels/*.whl; do
  python3 -m zipfile -e "$w" "$WORK/dslsite/"
done
site="$WORK/dslsite"
# What a zip does not keep (execute bits, links) and what the GPU machine does not need.
find "$site" -name "*.so*" -exec chmod +x {} +
rm -rf "$site"/z3_solver-*.data/data/bin "$site"/nvidia_cutlass_dsl/cu13/lib/stubs/aarch64-*
for lib in "$site"/z3/lib/libz3.so.*; do
  [ -f "$lib" ] && cmp -s "$lib" "$site/z3/lib/libz3.so" && ln -sf "$(basename "$lib")" "$site/z3/lib/libz3.so"
done
tar cf - -C "$WORK" dslsite | xz -T0 -9 > "$WORK/dsl.tar.xz"
rm -f "$OUT"/part.*
split -b "$PART" "$WORK/dsl.tar.xz" "$OUT/part."
(cd "$WORK" && sha256sum dsl.tar.xz) > "$OUT/dsl.sha256"
ls -l "$OUT"
