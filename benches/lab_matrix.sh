#!/usr/bin/env bash
# Every lab experiment under SCHED_OTHER and SCHED_FIFO, without and with background load:
# p50 / p99 in µs per run. Needs root for fifo (otherwise it runs with a warning).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p rtloop
R=target/release/rtloop
N=${SAMPLES:-2000}
printf "%-34s %-6s %-5s %9s %9s\n" experiment policy load p50_us p99_us
for policy in other fifo; do
  for load in 0 2; do
    pargs=(--policy "$policy"); [ "$policy" = fifo ] && pargs+=(--priority 80)
    for exp in "wakeup" "udp-echo --sizes 64 --methods blocking,epoll,busy-poll" "event" "serial" "cycle"; do
      # shellcheck disable=SC2086
      "$R" lab $exp --samples "$N" --load "$load" "${pargs[@]}" --json 2>/dev/null | tail -1 |
        python3 -c '
import json, sys
j = json.load(sys.stdin)
runs = j.get("results") or [j]
for r in runs:
    print("%-34s %-6s %-5s %9.1f %9.1f" % (r.get("label", j.get("experiment")), sys.argv[1], sys.argv[2], r["p50_us"], r["p99_us"]))
' "$policy" "$load"
    done
  done
done
