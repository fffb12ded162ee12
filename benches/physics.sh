#!/usr/bin/env bash
# The physics figures of issue 24 in one run, side by side:
#   1. MuJoCo's own mj_step for the built-in quadruped (the limit), the plant rtloop steps, and
#      twelve servos coupled to it (cargo bench -p rtloop-physics --features mujoco --bench step);
#   2. lockstep: `rtloop run --lockstep` with the demo motion, with and without --physics:
#      simulated 1 kHz cycles per wall-clock second (ROUNDS rounds of SECONDS simulated seconds);
#   3. the Python environment rtloop.gym, env.step() per second, when the test venv has it
#      (python/bench/bench_gym.py; RTLOOP_PYTHON names a Python with rtloop and gymnasium);
#   4. real time: 1 kHz under SCHED_FIFO 80 for SECONDS, with and without --physics: cycle and
#      wakeup percentiles and overruns.
# Needs root for row 4 (it says so otherwise). Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECONDS_RUN=${SECONDS_RUN:-20}
. benches/rtloop_bin.sh
RTLOOP=${RTLOOP:-$(rtloop_release_bin physics)}

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -r), $(uptime | sed 's/.*load/load/')"
echo
echo "== 1. MuJoCo's step and rtloop's (cargo bench -p rtloop-physics --features mujoco --bench step)"
cargo bench -q -p rtloop-physics --features mujoco --bench step 2>/dev/null | grep -v '^$'
echo
echo "== 2. lockstep, demo motion, ${SECONDS_RUN} s simulated at 1 kHz"
printf '%-22s %8s %8s %12s\n' "run" "cycles" "wall s" "cycles/s"
for round in $(seq "$ROUNDS"); do
  for physics in "" "--physics"; do
    "$RTLOOP" run --lockstep $physics --duration "$SECONDS_RUN" --json --quiet | tail -1 | python3 -c '
import json, sys
j = json.load(sys.stdin)
label = ("physics " if sys.argv[1] else "no physics ") + sys.argv[2]
print("%-22s %8d %8.2f %12.0f" % (label, j["cycles"], j["loop_wall_s"], j["cycles"] / j["loop_wall_s"]))' "$physics" "$round"
  done
done
echo
echo "== 3. Python: rtloop.gym env.step() per second"
PY=${RTLOOP_PYTHON:-$(ls -d target/tmp/rtloop-python-venv-*/bin/python 2>/dev/null | head -1 || true)}
if [ -n "$PY" ] && [ -e python/bench/bench_gym.py ] && "$PY" -c "import rtloop.gym" 2>/dev/null; then
  RTLOOP_BIN="$RTLOOP" "$PY" python/bench/bench_gym.py
else
  echo "(skipped: no Python with rtloop and gymnasium; set RTLOOP_PYTHON, or run tools/test once)"
fi
echo
echo "== 4. real time, 1 kHz, SCHED_FIFO 80, ${SECONDS_RUN} s"
if [ "$(id -u)" != 0 ]; then
  echo "(skipped: SCHED_FIFO needs root)"
  exit 0
fi
printf '%-12s %7s %9s %8s %8s %8s %8s %8s %8s %8s\n' "run" "cycles" "overruns" "missing" "cyc p50" "cyc p99" "cyc max" "wake p50" "wake p99" "wake max"
for physics in "" "--physics"; do
  "$RTLOOP" run $physics --policy fifo --priority 80 --duration "$SECONDS_RUN" --json --quiet | tail -1 | python3 -c '
import json, sys
j = json.load(sys.stdin)
c, w = j["cycle_us"], j["wakeup_us"]
print("%-12s %7d %9d %8d %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f" % ("physics" if sys.argv[1] else "no physics", j["cycles"], j["overruns"], j["missing_replies"],
      c["p50"], c["p99"], c["max"], w["p50"], w["p99"], w["max"]))' "$physics"
done
echo "(µs; the cycle includes the simulated buses' wire time, ~750 µs of the 1000)"
