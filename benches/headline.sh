#!/usr/bin/env bash
# The headline figures in one run, each beside its reference on the same machine and in the same
# session (the table of benches/README.md):
#   1. how fast the loop goes: benches/rate_vs_cyclictest.sh (rtloop run --no-wire-time at 10, 20
#      and 50 kHz under SCHED_FIFO 80 beside cyclictest at the same periods);
#   2. the codec beside the official moteus-protocol crate (cargo bench -p rtloop-proto --bench codec);
#   3. the host cost of one 12-servo cycle (cargo bench -p rtloop-io --bench cycle);
#   4. rtloop lab compare's wakeup and UDP rows beside cyclictest and sockperf;
#   5. the quadruped on four pi3hat:sim buses at 1 kHz on the real clock (rtloop's default
#      policy), beside cyclictest at 1 kHz counting its wakeups later than the slack that
#      cycle leaves (1000 µs minus the 846.6 µs the model gives it).
# Needs root, cyclictest and sockperf (apt-get install rt-tests sockperf). ROUNDS (default 3)
# applies to rows 1 and 5. Takes about 4 minutes once built. Run it on a quiet machine: every
# row is a latency, and a compiler on the other core moves all of them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
. benches/rtloop_bin.sh
RTLOOP=${RTLOOP:-$(rtloop_release_bin)}
. benches/cyclictest_hist.sh
export RTLOOP ROUNDS

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -r), $(uptime | sed 's/.*load/load/')"
echo
echo "== 1. rate (benches/rate_vs_cyclictest.sh)"
bash benches/rate_vs_cyclictest.sh
echo
echo "== 2. codec (cargo bench -p rtloop-proto --bench codec)"
cargo bench -q -p rtloop-proto --bench codec 2>/dev/null | grep -v '^$'
echo
echo "== 3. host cycle (cargo bench -p rtloop-io --bench cycle)"
cargo bench -q -p rtloop-io --bench cycle 2>/dev/null | grep -v '^$'
echo
echo "== 4. lab compare (rtloop lab compare --samples 3000)"
"$RTLOOP" lab compare --samples 3000 | sed -n '1,4p'
echo
echo "== 5. quadruped on four pi3hat:sim buses, 1 kHz, 5 s, default policy"
printf '%-12s %8s %9s %7s %9s\n' "round" "cycles" "overruns" "missing" "policy"
for round in $(seq "$ROUNDS"); do
  "$RTLOOP" run --bus 1=pi3hat:sim --bus 2=pi3hat:sim --bus 3=pi3hat:sim --bus 4=pi3hat:sim \
    --ids 1=1-3 --ids 2=4-6 --ids 3=7-9 --ids 4=10-12 --duration 5 --json --quiet | tail -1 |
    python3 -c '
import json, sys
j = json.load(sys.stdin)
print("%-12s %8d %9d %7d %9s" % ("rtloop " + sys.argv[1], j["cycles"], j["overruns"], j["missing_replies"], j["realtime"]["policy"]))' "$round"
  hist=$(mktemp)
  cyclictest -m -p 40 -i 1000 -l 5000 -q -h 20000 >"$hist"
  read -r _ _ late _ _ n < <(pct_from_hist "$hist" 153)
  printf '%-12s %8d %9d %7s %9s\n' "cyclictest $round" "$n" "$late" "-" "fifo 40"
  rm -f "$hist"
done
echo "(cyclictest's overruns: its wakeups more than 153 µs late, the slack the quadruped's 846.6 µs cycle leaves)"
