#!/usr/bin/env bash
# Every lab experiment under SCHED_OTHER and SCHED_FIFO, without and with background load:
# p50 / p99 in µs per run. Needs root for fifo (otherwise it runs with a warning).
# SAMPLES=N sets the samples per run (default 2000).
set -euo pipefail
cd "$(dirname "$0")/.."
. benches/rtloop_bin.sh
R=$(rtloop_release_bin)
N=${SAMPLES:-2000}
err=$(mktemp)
trap 'rm -f "$err"' EXIT
printf "%-34s %-6s %-5s %9s %9s\n" experiment policy load p50_us p99_us
for policy in other fifo; do
  for load in 0 2; do
    pargs=(--policy "$policy"); [ "$policy" = fifo ] && pargs+=(--priority 80)
    for exp in "wakeup" "udp-echo --sizes 64 --methods blocking,epoll,busy-poll" "event" "serial" "cycle"; do
      # shellcheck disable=SC2086
      if ! out=$("$R" lab $exp --samples "$N" --load "$load" "${pargs[@]}" --json --no-progress 2>"$err"); then
        echo "rtloop lab $exp (policy $policy, load $load) failed:" >&2
        cat "$err" >&2
        exit 1
      fi
      tail -1 <<<"$out" | python3 -c '
import json, sys
j = json.load(sys.stdin)
runs = j.get("results") or [j]
for r in runs:
    print("%-34s %-6s %-5s %9.1f %9.1f" % (r.get("label", j.get("experiment")), sys.argv[1], sys.argv[2], r["p50_us"], r["p99_us"]))
' "$policy" "$load"
    done
  done
done
