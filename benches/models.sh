#!/usr/bin/env bash
# Other people's robots (issue 31's figures), side by side in one run: MuJoCo's own mj_step for
# each model file as shipped (at its own time step: the limit) and `rtloop run --lockstep` of
# the same file through examples/robots/*.toml (the demo motion, 1 kHz; a 2 ms model step is
# adapted to 1 ms, so rtloop steps MuJoCo twice as often per simulated second). Both as
# simulated seconds per wall second. Needs tools/models (it runs it). Run on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_RUN=${SECONDS_RUN:-10}
. benches/rtloop_bin.sh
RTLOOP=${RTLOOP:-$(rtloop_release_bin physics)}
models=$(tools/models)

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(uname -r), $(uptime | sed 's/.*load/load/')"
echo
echo "== 1. mj_step as shipped (cargo bench -p rtloop-physics --features mujoco --bench step)"
cargo bench -q -p rtloop-physics --features mujoco --bench step 2>/dev/null | grep -v '^$'
echo
echo "== 2. rtloop run --lockstep, demo motion, ${SECONDS_RUN} s simulated at 1 kHz"
printf '%-14s %8s %8s %12s %22s\n' "robot" "cycles" "wall s" "cycles/s" "simulated s per wall s"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {
  "$RTLOOP" run --lockstep "$@" --duration "$SECONDS_RUN" --json --quiet 2>/dev/null | tail -1
}
report() {
  python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
r = j["cycles"] / j["loop_wall_s"]
print("%-14s %8d %8.2f %12.0f %22.1f" % (sys.argv[1], j["cycles"], j["loop_wall_s"], r, r / 1000.0))' "$1"
}
run --physics | report "built-in"
for robot in go2 ur5e; do
  sed "s#../../target/models#$models#" "examples/robots/$robot.toml" >"$tmp/$robot.toml"
  run --config "$tmp/$robot.toml" --physics | report "$robot"
done
sed "s#../../target/models/go2/scene_flat.xml#$models/go1/scene_flat.xml#; s#pose = \"down\"#pose = \"home\"#" \
  examples/robots/go2.toml >"$tmp/go1.toml"
run --config "$tmp/go1.toml" --physics | report "go1"
