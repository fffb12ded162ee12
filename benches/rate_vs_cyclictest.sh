#!/usr/bin/env bash
# How fast the loop can go: `rtloop run --no-wire-time` (the 12-servo simulated robot, no
# wire time, so only the host's work remains) at 10, 20 and 50 kHz under SCHED_FIFO 80 with
# mlockall, beside cyclictest at the same periods (-i 100/50/20), same settings.
# Both run in the same round at the same time, each pinned to its own CPU (swapped every
# round), so both meet the same host: on a VM the wakeup tail changes several-fold from one
# second to the next, and runs taken one after the other compare two different machines.
# Per rate: the rate reached, overruns, wakeup p50 / p99 µs, cycle p50 µs (the bus exchange),
# medians of ROUNDS rounds (default 5) of RUN_SECONDS each (default 3). cyclictest's
# "overruns" are its wakeups later than the slack rtloop's cycle left in the same round (period
# minus rtloop's cycle p50), scaled to rtloop's number of cycles: what the machine's wakeup
# tail alone would cost any loop doing rtloop's work, so rtloop's count beside it says how much
# of its own it adds; the last table gives the ratio of the two per rate (the goal: at most 1
# at 10 and 20 kHz, without busy-waiting). With one CPU the two run one after the other.
# Needs root and cyclictest (apt-get install rt-tests). RATES="10000 20000" picks the rates;
# RTLOOP=PATH uses that binary instead of building one; RUN_ARGS="--busy-wait-us 25" adds flags
# to every rtloop run (spinning the last 25 µs hides the kernel's wakeup latency).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
SECONDS_PER_RUN=${RUN_SECONDS:-3}
RATES=${RATES:-10000 20000 50000}
command -v cyclictest >/dev/null || { echo "cyclictest is missing: apt-get install rt-tests" >&2; exit 2; }
if [ -z "${RTLOOP:-}" ]; then
  . benches/rtloop_bin.sh
  RTLOOP=$(rtloop_release_bin)
fi
. benches/cyclictest_hist.sh
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT

cpus=$(nproc)
for round in $(seq "$ROUNDS"); do
  for rate in $RATES; do
    interval=$((1000000 / rate))
    hist=$(mktemp)
    # cyclictest starts first and runs a second longer than rtloop's loop, covering its start
    # and end; its late wakeups are scaled per wakeup below.
    cyclictest_args=(-m -p 80 -i "$interval" -l $((rate * (SECONDS_PER_RUN + 1))) -q -h 2000)
    pin=()
    if [ "$cpus" -ge 2 ]; then
      ours=$((round % 2))
      pin=(--cpu "$ours")
      cyclictest -a $((1 - ours)) "${cyclictest_args[@]}" >"$hist" &
      sleep 0.3
    fi
    # shellcheck disable=SC2086 # RUN_ARGS is a list of flags
    out=$("$RTLOOP" run --no-wire-time --rate "$rate" --duration "$SECONDS_PER_RUN" --policy fifo --priority 80 \
      --mlock --json --quiet "${pin[@]}" ${RUN_ARGS:-}) || [ $? -eq 1 ] || { echo "rtloop run --rate $rate failed" >&2; exit 1; }
    if [ "$cpus" -ge 2 ]; then
      wait
    else
      cyclictest "${cyclictest_args[@]}" >"$hist"
    fi
    tail -1 <<<"$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(sys.argv[1], "rtloop", j["rate_hz"], j["overruns"], j["wakeup_us"]["p50"], j["wakeup_us"]["p99"], j["cycle_us"]["p50"], j["cycles"])
' "$rate" >>"$rows"
    # The slack this round's rtloop cycle left: period − its cycle p50; rtloop's cycles.
    read -r slack cycles < <(tail -1 "$rows" | awk -v p="$interval" '{ print p - $7, $8 }')
    read -r p50 p99 late _ _ n < <(pct_from_hist "$hist" "$slack")
    scaled=$(python3 -c "print(round($late * $cycles / max($n, 1)))")
    echo "$rate cyclictest - $scaled $p50 $p99 -" >>"$rows"
    rm -f "$hist"
  done
done

echo "cyclictest's overruns: its wakeups later than the period minus rtloop's cycle p50 of the same round, per rtloop's cycles"
[ "$cpus" -ge 2 ] && echo "side by side, each on its own CPU (swapped every round)" || echo "one after the other (one CPU)"
echo "12 simulated servos, no wire time, SCHED_FIFO 80 + mlockall ${RUN_ARGS:-}; medians of $ROUNDS × ${SECONDS_PER_RUN} s ($(uptime | sed 's/.*load/load/'))"
python3 - "$rows" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print("%-28s %10s %10s %10s %10s %10s" % ("", "Hz", "overruns", "wake p50", "wake p99", "cycle p50"))
for rate in dict.fromkeys(r[0] for r in rows):
    for who in ("rtloop", "cyclictest"):
        mine = [r for r in rows if r[0] == rate and r[1] == who]
        med = lambda i: statistics.median(float(r[i]) for r in mine)
        label = f"rtloop run --rate {rate}" if who == "rtloop" else f"cyclictest -i {1000000 // int(rate)}"
        if who == "rtloop":
            print("%-28s %10.0f %10.0f %10.1f %10.1f %10.1f" % (label, med(2), med(3), med(4), med(5), med(6)))
        else:
            print("%-28s %10s %10.0f %10.1f %10.1f %10s" % (label, "-", med(3), med(4), med(5), "-"))
# The goal, per rate, rtloop's overruns no more than cyclictest's late wakeups (ratio <= 1).
print()
print("%-28s %10s %10s %10s" % ("overruns: rtloop / cyclictest", "rtloop", "cyclictest", "ratio"))
for rate in dict.fromkeys(r[0] for r in rows):
    ours = statistics.median(float(r[3]) for r in rows if r[0] == rate and r[1] == "rtloop")
    theirs = statistics.median(float(r[3]) for r in rows if r[0] == rate and r[1] == "cyclictest")
    ratio = "%.2f" % (ours / theirs) if theirs else ("1.00" if ours == 0 else "inf")
    print("%-28s %10.0f %10.0f %10s" % (f"at {int(rate) // 1000} kHz", ours, theirs, ratio))
EOF
