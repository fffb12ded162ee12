#!/usr/bin/env python3
"""Cross-check `rtloop frame encode position` against the official moteus Python package.

Usage (from the repository root, after `cargo build --release -p rtloop-cli`):
    python3 -m venv /tmp/mvenv && /tmp/mvenv/bin/pip install moteus
    /tmp/mvenv/bin/python tools/crosscheck_moteus_py.py [path/to/rtloop]

Builds random position commands (all four resolutions, NaN, out-of-range values, with and
without the default query) with moteus.Controller.make_position and with rtloop, and
compares `HEXID HEXDATA`. Exits non-zero on any mismatch.
"""
import math
import random
import subprocess
import sys

import moteus

RTLOOP = sys.argv[1] if len(sys.argv) > 1 else "target/release/rtloop"
random.seed(7)
R = {'int8': moteus.multiplex.INT8, 'int16': moteus.multiplex.INT16, 'int32': moteus.multiplex.INT32, 'float': moteus.multiplex.F32}
fields = ['position','velocity','feedforward_torque','kp_scale','kd_scale','maximum_torque','watchdog_timeout','velocity_limit','accel_limit']
bad = 0; n = 0
for trial in range(300):
    res = random.choice(list(R))
    pr = moteus.PositionResolution()
    for f in fields:
        setattr(pr, f, R[res])
    c = moteus.Controller(id=random.randint(1,127), position_resolution=pr)
    kw = {}
    for f in fields:
        if random.random() < 0.5:
            kw[f] = random.choice([random.uniform(-3,3), random.uniform(-0.05,0.05), math.nan, round(random.uniform(-2,2),3), 0.0, 1e6])
    q = random.random() < 0.5
    m = c.make_position(query=q, **kw)
    want = f"{((m.source << 8) | m.destination | (0x8000 if m.reply_required else 0)) | (getattr(m, 'can_prefix', 0) << 16):04x} {m.data.hex()}"
    args = [RTLOOP,"frame","encode","position","--id",str(c.id),"--resolution",res]
    for k,v in kw.items():
        args += ["--"+k.replace('_','-'), repr(v) if not math.isnan(v) else "NaN"]
    if q: args.append("--query")
    got = subprocess.run(args, capture_output=True, text=True)
    n += 1
    if got.stdout.strip() != want:
        bad += 1
        if bad < 6: print("MISMATCH", kw, res, q, "\n want", want, "\n got ", got.stdout.strip(), got.stderr.strip())
print(n, "compared,", bad, "mismatches")
sys.exit(1 if bad else 0)
