#!/usr/bin/env bash
# Captures the Nsight Compute and compute-sanitizer output that the profile parsers are tested on
# (tests/fixtures/profile/), on a machine with a GPU, ncu, compute-sanitizer, nvcc, torch, CuPy
# and rung's release binary:
#
#   scripts/capture-profile-fixtures.sh RUNG_BINARY OUT_DIR
#
# ncu profiles each demo kernel once at the benchmark size (launched by bench_validate.py, the
# same launch the bench validation uses), with every section (--set full) and source-level
# counters; its raw page and its source page (SASS with per-instruction counters) are exported as
# CSV. compute-sanitizer runs memcheck on the demo's out-of-bounds fault and racecheck on a
# reduction missing its barriers (tests/fixtures/profile/sanitize.cu).
set -uo pipefail
RUNG=$(realpath "${1:-target/release/rung}")
OUT=$(realpath -m "${2:-profile-fixtures}")
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
W=$(mktemp -d)
"$RUNG" new "$W/demo" --template rmsnorm > /dev/null
cd "$W/demo" || exit 1
"$RUNG" check --all --no-bench --json > "$OUT/demo-report.json" 2> "$OUT/demo-check.err"
for v in v001 v002 v003 v004 v005; do
  ncu --set full --import-source yes --clock-control none -k regex:rmsnorm --launch-count 1 -f -o "$OUT/$v" \
      python3 "$HERE/bench_validate.py" . "$OUT/demo-report.json" launch "$v" 1 > "$OUT/$v.ncu.log" 2>&1
  ncu --import "$OUT/$v.ncu-rep" --csv --page raw > "$OUT/$v.raw.csv" 2>> "$OUT/$v.ncu.log"
  ncu --import "$OUT/$v.ncu-rep" --csv --page source --print-source sass > "$OUT/$v.source.csv" 2>> "$OUT/$v.ncu.log"
done
nvcc -arch=sm_90 -lineinfo -o "$W/sanitize" "$HERE/../tests/fixtures/profile/sanitize.cu"
cd "$W" || exit 1
cp "$HERE/../tests/fixtures/profile/sanitize.cu" .
compute-sanitizer --tool memcheck ./sanitize > "$OUT/memcheck.txt" 2>&1
compute-sanitizer --tool racecheck ./sanitize race > "$OUT/racecheck.txt" 2>&1
ncu --version > "$OUT/versions.txt" 2>&1; compute-sanitizer --version >> "$OUT/versions.txt" 2>&1
ls -la "$OUT"
# One archive, for machines that hand back few files.
if [ -n "${ARCHIVE:-}" ]; then tar -C "$OUT" -czf "$ARCHIVE" . && ls -la "$ARCHIVE"; fi
