# Sourced by the bench scripts: build rtloop in release and print the path of the binary cargo
# says it built — where CARGO_TARGET_DIR, a cargo config's build.target-dir or --target put
# it (target/release is only the default). Exits the script when there is none.
# `rtloop_release_bin physics` builds it with physics (MuJoCo: rtloop-cli's feature `physics`),
# fetching MuJoCo's library first (tools/mujoco).
rtloop_release_bin() {
  local bin features=()
  if [ "${1:-}" = physics ]; then
    MUJOCO_DYNAMIC_LINK_DIR=$(tools/mujoco) || exit 1
    export MUJOCO_DYNAMIC_LINK_DIR
    features=(--features physics)
  fi
  bin=$(cargo build --release -q -p rtloop-cli "${features[@]}" --message-format=json-render-diagnostics | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "rtloop" and m.get("executable"):
        print(m["executable"])')
  [ -x "$bin" ] || { echo "cargo did not report an rtloop binary" >&2; exit 1; }
  echo "$bin"
}
