#!/usr/bin/env python3
"""Encode commands with the unmodified moteus Python package, one per input line.

Reads JSON lines on stdin, writes one line per input on stdout: `HEXID HEXDATA`, or
`error: ...` when the package refuses the input (it raises on NaN for an integer register
and on floats too large for binary32, where rtloop sends "unset" or clamps).

    {"kind": "query" | "position" | "stop" | "brake", "id": 1, "query": true,
     "q": {"mode": "int8", ..., "extra": [[16, "float"], ...]},   # QueryResolution
     "pr": {"position": "int16", ...},                              # PositionResolution
     "values": {"position": 0.5, "velocity": "nan", ...}}           # make_position kwargs

Used by crates/rtloop/tests/rtloop/python_encoder.rs.
"""
import json
import sys

import moteus
import moteus.multiplex as mp

RES = {"int8": mp.INT8, "int16": mp.INT16, "int32": mp.INT32, "float": mp.F32, None: mp.IGNORE}
SPECIAL = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
QUERY_FIELDS = ["mode", "position", "velocity", "torque", "q_current", "d_current", "abs_position", "power",
                "motor_temperature", "trajectory_complete", "home_state", "voltage", "temperature", "fault"]


def query_resolution(q):
    qr = moteus.QueryResolution()
    for f in QUERY_FIELDS:
        setattr(qr, f, RES[q.get(f)])
    qr.rezero_state = mp.IGNORE
    # _extra is a class attribute: give this instance its own dictionary.
    qr._extra = {reg: RES[res] for reg, res in q.get("extra", [])}
    return qr


def position_resolution(pr):
    out = moteus.PositionResolution()
    for f, res in pr.items():
        setattr(out, f, RES[res])
    return out


def encode(case):
    kw = {"id": case["id"]}
    if "q" in case:
        kw["query_resolution"] = query_resolution(case["q"])
    if "pr" in case:
        kw["position_resolution"] = position_resolution(case["pr"])
    c = moteus.Controller(**kw)
    kind = case["kind"]
    query = case.get("query", False)
    if kind == "query":
        m = c.make_query()
    elif kind == "position":
        values = {k: SPECIAL.get(v, v) if isinstance(v, str) else v for k, v in case["values"].items()}
        m = c.make_position(query=query, **values)
    elif kind == "stop":
        m = c.make_stop(query=query)
    elif kind == "brake":
        m = c.make_brake(query=query)
    else:
        raise ValueError(f"unknown kind {kind}")
    arb = (m.can_prefix << 16) | (0x8000 if m.reply_required else 0) | (m.source << 8) | m.destination
    return f"{arb:04x} {m.data.hex()}"


def main():
    for line in sys.stdin:
        try:
            out = encode(json.loads(line))
        except (ValueError, OverflowError, struct_error()) as e:
            out = f"error: {type(e).__name__}: {e}"
        print(out, flush=False)


def struct_error():
    import struct
    return struct.error


if __name__ == "__main__":
    main()
