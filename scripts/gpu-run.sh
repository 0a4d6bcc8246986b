#!/usr/bin/env bash
# rung's GPU measurements, step by step, on a machine with a GPU and rung's release binary (no
# Rust needed there). After every step, and every 20 s, the logs so far are packed again into
# OUT/logs.tgz, so a run stopped part way still leaves what it did.
#
#   RUNG=path/to/rung scripts/gpu-run.sh OUT STEP...
#
# Steps:
#   info         the GPU, its driver and clocks, `rung doctor`
#   demo         `rung demo` from scratch (wall time), then the recorded phases of every rung
#   warm         `rung selftest --gpu --only warm`: save-to-row times, warm and fresh
#   st-PARTS     `rung selftest --gpu --only PARTS` (a comma list of faults, lanes, workspaces,
#                warm, profile, auto, trace, sandbox); st-lanes: the CUDA fault cases in one check,
#                in check lanes, each against its verdict (quick)
#   repeat       five benches of the demo's v003 in a row: the spread of their medians
#   suite        scripts/gpu-suite.sh (every selftest part, the bench validation, ncu agreement;
#                past ten minutes on an H100: SELFTEST_ARGS="--only bench" keeps the bench part
#                and the ncu table, the other parts go in st-PARTS steps)
#   conf         scripts/conformance.py on CONFORMANCE (default ../shared/conformance)
#   confbench    the same with CONFORMANCE_BENCH=1 (CONFORMANCE_ONLY narrows it)
#   outslot      `rung check --json` on tests/fixtures/gpu-mode/outslot
#   dsl          the cute-dsl and tilelang templates: check, approve the float4 CUDA version, check
#                and bench the DSL version (`launched` must name its kernels), its SASS beside
#                the Triton one, and a copy with an undefined name in the kernel (the error's
#                line); DSL_SITE names a folder holding the DSL wheels unpacked (made by
#                scripts/dsl-wheels.sh); DSL_ONLY=tilelang (or cute-dsl) takes one template
#   dsl-trace    `rung selftest --gpu --only trace` with the DSL wheels on the path (DSL_SITE as
#                for dsl): the CuTe DSL and TileLang templates' adds traced beside the others
#   profile-V    `rung profile V` (Nsight Compute) on the demo workspace left by `demo` (a
#                Python version's call is served by the zygote itself, unforked); past 60 s without an answer, every rung and Python thread's state and kernel wait
#                channel from /proc go in the log (a stalled worker says where it waits)
#   trace-leaders the demo's v002 traced twice with one leader per warp and twice with one per
#                block (`--leader`): the overhead of each
#   honest       the honest versions beside the cheat fixtures, benched by rung and timed by Nsight
#                Compute (scripts/ncu_agree.py): the fault cases' c-good.cu and t-good.py in the
#                demo problem, GPU MODE outslot's v001 and v002, KernelBench 19_Linear_ReLU's
#                v001 and v002
#   selftest-bg  the whole `rung selftest --gpu` table started in a process session of its own
#                (setsid), so it runs on past this call while the machine stays; its table goes
#                to logs/selftest.txt, its exit status to logs/selftest.rc
#   selftest-wait waits for it (at most WAIT_S seconds, default 540)
#   builds       benches/check_builds.sh: BUILDS_N (default 200) CUDA versions built one at a time
#                and as rung chooses (BUILDS_HIDE_GPU=1: builds only, the GPU hidden from rung)
#   builds-hidden the same with BUILDS_HIDE_GPU=1, in a log of its own
#   nvdisasm     nvdisasm's fixed cost: the vector-add template's naive version as a cubin,
#                disassembled five times by 1 and by 16 processes at once, each with and without
#                GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (fewer page faults while it builds its tables)
#   tui          benches/tui.rs's executable (TUI_BENCH, built here by `cargo bench --bench tui
#                --no-run`) with a check beside that builds and benches TUI_BENCHES (default 20)
#                versions: key to frame and resident memory during builds and benches
set -uo pipefail
OUT=${1:?OUT folder}
shift
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$HERE")
RUNG=$(realpath "${RUNG:-$ROOT/target/release/rung}")
WORK=${GPU_RUN_WORK:-/tmp/rung-gpu-run}
LOGS="$WORK/logs"
mkdir -p "$OUT" "$LOGS"
PY=${RUNG_PYTHON:-python3}

pack() {
  local part="$OUT/.logs.$BASHPID.tgz"
  tar czf "$part" -C "$WORK" logs 2>/dev/null && mv "$part" "$OUT/logs.tgz"
}
# Packed every 20 s as well, so a step stopped by a time limit still leaves its log so far.
( while sleep 20; do pack; done ) &
packer=$!
trap 'kill $packer 2>/dev/null' EXIT
# The demo workspace a step works in: the `demo` step's, else one made now.
demo_ws() { [ -d "$WORK/demo" ] || "$RUNG" demo "$WORK/demo" > /dev/null 2>&1; }
stamp() { date +%s.%N; }
took() { "$PY" -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(stamp)"; }

# Every rung and Python process's threads: state and kernel wait channel, from /proc.
procs() {
  for d in /proc/[0-9]*; do
    cmd=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) || continue
    case "$cmd" in *rung*|*python*) ;; *) continue ;; esac
    echo "pid ${d#/proc/}: ${cmd:0:160}"
    for t in "$d"/task/*; do
      echo "  tid ${t##*/} $(cat "$t/comm" 2>/dev/null) state=$(awk '{print $3}' "$t/stat" 2>/dev/null) wchan=$(cat "$t/wchan" 2>/dev/null)"
    done
  done
}

for step in "$@"; do
  log="$LOGS/$step.log"
  echo "== $step" | tee "$log"
  t0=$(stamp)
  case "$step" in
    info)
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,persistence_mode --format=csv 2>&1 | tee -a "$log"
      nproc | tee -a "$log"
      lscpu 2>/dev/null | grep -E "^(Model name|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|CPU\(s\)|CPU max MHz)" | tee -a "$log"
      "$RUNG" --version 2>&1 | tee -a "$log"
      "$RUNG" doctor 2>&1 | tee -a "$log"
      ;;
    demo)
      rm -rf "$WORK/demo"
      /usr/bin/time -v "$RUNG" demo "$WORK/demo" >> "$log" 2>&1
      echo "rung demo: exit $?" | tee -a "$log"
      "$RUNG" -C "$WORK/demo" history --json --limit 200 > "$LOGS/demo-history.json" 2>> "$log"
      "$PY" "$HERE/phases.py" "$LOGS/demo-history.json" 2>&1 | tee -a "$log"
      ;;
    warm)
      "$RUNG" selftest --gpu --only warm --dir "$WORK/st-warm" --out "$LOGS/warm.json" >> "$log" 2>&1
      echo "exit $?" | tee -a "$log"
      ;;
    st-*)
      part=${step#st-}
      "$RUNG" selftest --gpu --only "$part" --dir "$WORK/st-$part" --out "$LOGS/st-$part.json" >> "$log" 2>&1
      echo "exit $?" | tee -a "$log"
      ;;
    repeat)
      demo_ws
      for i in 1 2 3 4 5; do
        "$RUNG" -C "$WORK/demo" check v003 --json > "$LOGS/repeat-$i.json" 2>> "$log"
      done
      "$PY" "$HERE/phases.py" --repeat "$LOGS"/repeat-*.json 2>&1 | tee -a "$log"
      ;;
    suite)
      GPU_SUITE_WORK="$WORK/suite" RUNG_PYTHON="$PY" bash "$HERE/gpu-suite.sh" "$RUNG" "$LOGS/suite" >> "$log" 2>&1
      echo "exit $?" | tee -a "$log"
      ;;
    conf | confbench)
      [ "$step" = confbench ] && export CONFORMANCE_BENCH=1
      PYTHONUNBUFFERED=1 "$PY" "$HERE/conformance.py" "$RUNG" "${CONFORMANCE:-$ROOT/../shared/conformance}" "$WORK/$step" >> "$log" 2>&1
      echo "exit $?" | tee -a "$log"
      unset CONFORMANCE_BENCH
      ;;
    outslot)
      rm -rf "$WORK/outslot" && cp -r "$ROOT/tests/fixtures/gpu-mode/outslot" "$WORK/outslot"
      "$RUNG" -C "$WORK/outslot" check --json > "$LOGS/outslot.json" 2>> "$log"
      echo "exit $?" | tee -a "$log"
      ;;
    dsl)
      site=$(realpath "${DSL_SITE:?DSL_SITE: the unpacked DSL wheels}")
      # A wheel's .pth is not read from PYTHONPATH: the CUTLASS DSL's own packages go first.
      export PYTHONPATH="$site/nvidia_cutlass_dsl/dsl_packages:$site${PYTHONPATH:+:$PYTHONPATH}"
      for t in ${DSL_ONLY:-cute-dsl tilelang}; do
        ws="$WORK/$t"
        rm -rf "$ws"
        "$RUNG" new "$ws" --template "$t" >> "$log" 2>&1
        v4=$(ls "$ws"/versions/v004-*.py)
        # The same kernel with an undefined name in its body: its error must name this line.
        sed -E '0,/^( +)(gC\[i\]|C\[idx\]) = /s//\1\2 = undefined_name + /' "$v4" > "$ws/versions/v005-broken.py"
        grep -n undefined_name "$ws/versions/v005-broken.py" | tee -a "$log"
        "$RUNG" -C "$ws" check --json > "$LOGS/$t-check.json" 2>> "$log"
        echo "$t check: exit $?" | tee -a "$log"
        "$RUNG" -C "$ws" approve v002 >> "$log" 2>&1
        "$RUNG" -C "$ws" check v004 --json > "$LOGS/$t-v004.json" 2>> "$log"
        echo "$t check v004: exit $?" | tee -a "$log"
        "$RUNG" -C "$ws" diff v003 v004 --sass > "$LOGS/$t-sass.txt" 2>> "$log"
        "$RUNG" -C "$ws" history --json --limit 50 > "$LOGS/$t-history.json" 2>> "$log"
        "$PY" - "$LOGS/$t-check.json" "$LOGS/$t-v004.json" <<'PYEOF' 2>&1 | tee -a "$log"
import json, sys
for path in sys.argv[1:]:
    try:
        doc = json.load(open(path))
    except Exception as e:
        print(path, "unreadable:", e)
        continue
    for v in doc.get("versions", []):
        print(v.get("id"), v.get("verdict"))
        for s in v.get("stages", []):
            print("  ", s.get("stage"), s.get("verdict"), s.get("reason") or "", "|", (s.get("summary") or "")[:160])
            d = s.get("detail") or {}
            if d.get("launched"):
                print("     launched:", [(k.get("compiler"), k.get("name"), bool(k.get("cubin"))) for k in d["launched"]])
            for m in (s.get("diagnostics") or [])[:2]:
                print("     diag: %s:%s:%s %s" % (m.get("file"), m.get("line"), m.get("column"), (m.get("message") or "")[:160]))
PYEOF
      done
      ;;
    dsl-trace)
      # The selftest's trace part with the DSL wheels on the path: the CuTe DSL and TileLang rows
      # join the .cu, Triton and .ptx ones.
      site=$(realpath "${DSL_SITE:?DSL_SITE: the unpacked DSL wheels}")
      export PYTHONPATH="$site/nvidia_cutlass_dsl/dsl_packages:$site${PYTHONPATH:+:$PYTHONPATH}"
      "$RUNG" selftest --gpu --only trace --dir "$WORK/dsl-trace" --out "$LOGS/dsl-trace.json" >> "$log" 2>&1
      echo "exit $?" | tee -a "$log"
      ;;
    profile-*)
      version=${step#profile-}
      demo_ws
      ( sleep 60; echo "-- threads at 60 s"; procs ) >> "$log.procs" 2>&1 &
      watcher=$!
      "$RUNG" -C "$WORK/demo" profile "$version" >> "$log" 2>&1
      echo "exit $?" | tee -a "$log"
      kill "$watcher" 2>/dev/null
      [ -s "$log.procs" ] && cat "$log.procs" >> "$log" && rm -f "$log.procs"
      ;;
    trace-leaders)
      demo_ws
      "$RUNG" -C "$WORK/demo" check v002 --json > "$LOGS/trace-check.json" 2>> "$log"
      echo "check: exit $?" | tee -a "$log"
      for leader in warp block warp block; do
        "$RUNG" -C "$WORK/demo" trace v002 --leader "$leader" >> "$log" 2>&1
        echo "trace v002 --leader $leader: exit $?" | tee -a "$log"
      done
      "$RUNG" -C "$WORK/demo" trace v002 --json > "$LOGS/trace-v002.json" 2>> "$log"
      ;;
    honest)
      H="$WORK/honest" && rm -rf "$H" && mkdir -p "$H"
      "$RUNG" new "$H/faults" --template rmsnorm >> "$log" 2>&1
      rm -f "$H/faults/versions/"*
      cp "$ROOT/tests/fixtures/faults/c-good.cu" "$H/faults/versions/v001-good.cu"
      cp "$ROOT/tests/fixtures/faults/t-good.py" "$H/faults/versions/v002-good.py"
      cp -r "$ROOT/tests/fixtures/gpu-mode/outslot" "$H/outslot"
      cp -r "$ROOT/tests/fixtures/kernelbench" "$H/kernelbench"
      for w in faults:v001,v002 outslot:v001,v002 kernelbench:v001,v002; do
        name=${w%%:*}
        # shellcheck disable=SC2046 # the ids, one argument each
        "$RUNG" -C "$H/$name" check $(echo "${w#*:}" | tr , ' ') --json > "$LOGS/honest-$name.json" 2>> "$log"
        echo "$name: rung check exit $?" | tee -a "$log"
        "$PY" "$HERE/ncu_agree.py" "$H/$name" "$LOGS/honest-$name.json" "$LOGS/honest-$name" 2>&1 | tee -a "$log"
      done
      ;;
    nvdisasm)
      cubin="$WORK/nvdisasm.cubin"
      nvcc -cubin -arch=sm_90 -o "$cubin" "$ROOT"/assets/templates/vector-add/versions/*naive.cu >> "$log" 2>&1
      for tunables in "" glibc.malloc.hugetlb=1; do
        for procs in 1 16; do
          t1=$(stamp)
          pids=()
          for _ in $(seq "$procs"); do
            (for _ in 1 2 3 4 5; do GLIBC_TUNABLES=$tunables nvdisasm -c -g "$cubin" > /dev/null; done) &
            pids+=($!)
          done
          wait "${pids[@]}"  # not the packer, which never ends
          echo "GLIBC_TUNABLES='$tunables', $procs at once: $("$PY" -c "import sys; print('%.3f' % ((float(sys.argv[2]) - float(sys.argv[1])) / 5))" "$t1" "$(stamp)") s a run" | tee -a "$log"
        done
      done
      ;;
    tui)
      RUNG="$RUNG" TUI_BENCH_BENCHES=${TUI_BENCHES:-20} "${TUI_BENCH:?TUI_BENCH: the tui bench executable}" --bench >> "$log" 2>&1
      echo "exit $?" | tee -a "$log"
      ;;
    selftest-bg)
      rm -rf "$WORK/st-all" "$LOGS/selftest.rc"
      setsid bash -c '"$0" selftest --gpu --dir "$1" --out "$2/selftest.json" > "$2/selftest.txt" 2>&1; echo $? > "$2/selftest.rc"' \
        "$RUNG" "$WORK/st-all" "$LOGS" < /dev/null > /dev/null 2>&1 &
      echo "started" | tee -a "$log"
      ;;
    selftest-wait)
      waited=0
      while [ ! -f "$LOGS/selftest.rc" ] && [ "$waited" -lt "${WAIT_S:-540}" ]; do sleep 5; waited=$((waited + 5)); done
      if [ -f "$LOGS/selftest.rc" ]; then echo "selftest exit $(cat "$LOGS/selftest.rc")" | tee -a "$log"; cat "$LOGS/selftest.txt" >> "$log"; else echo "still running after ${waited} s" | tee -a "$log"; fi
      ;;
    builds | builds-hidden)
      hide=${BUILDS_HIDE_GPU:-}
      [ "$step" = builds-hidden ] && hide=1
      BUILDS_HIDE_GPU=$hide bash "$ROOT/benches/check_builds.sh" "$RUNG" "${BUILDS_N:-200}" >> "$log" 2>&1
      echo "exit $?" | tee -a "$log"
      ;;
    *)
      echo "unknown step $step" | tee -a "$log"
      ;;
  esac
  echo "== $step took $(took "$t0") s" | tee -a "$log"
  pack
done
