"""The position-mode keywords of every API are the names of one table: moteus' position
command registers as `rtloop-proto` lists them (`_rtloop.POSITION_FIELDS`)."""

import ast
import inspect
import pathlib

import rtloop
from rtloop import _rtloop, frame

TABLE = _rtloop.POSITION_FIELDS
NAMES = [name for _, name, _ in TABLE]
# Keywords that are not register fields (`hold`: how many lockstep cycles an agent's command
# answers, agent protocol v3).
OTHERS = {"self", "kind", "id", "bus", "mode", "commands", "query", "resolution", "fields", "hold"}


def test_the_table_is_registers_0x020_to_0x02d_in_order():
    assert [register for register, _, _ in TABLE] == list(range(0x020, 0x02E))
    assert NAMES[0] == "position" and NAMES[7] == "watchdog_timeout"
    assert dict((name, kind) for _, name, kind in TABLE)["kp_scale"] == "ratio"


def check(where, names):
    fields = [n for n in names if n not in OTHERS]
    unknown = [n for n in fields if n not in NAMES]
    assert not unknown, f"{where}: {unknown} are not position fields ({NAMES})"
    assert fields == sorted(fields, key=NAMES.index), f"{where}: {fields} are not in register order"
    assert fields, f"{where} has no position fields"


def test_the_native_functions_take_the_table_s_names_in_its_order():
    for where, function in [
        ("Robot.cycle", _rtloop.Robot.cycle),
        ("Agent.command", _rtloop.Agent.command),
        ("frame_encode", _rtloop.frame_encode),
        ("Command", _rtloop.Command),
        ("rtloop.frame.encode", frame.encode),
    ]:
        check(where, list(inspect.signature(function).parameters))


def test_the_type_stubs_name_the_table_s_fields():
    stub = pathlib.Path(rtloop.__file__).parent / "_rtloop.pyi"
    tree = ast.parse(stub.read_text())
    checked = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "PositionFields":
            names = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign)]
            check("PositionFields", names)
            checked.append(node.name)
        if isinstance(node, ast.FunctionDef) and node.name in ("cycle", "command", "frame_encode"):
            args = node.args
            names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
            if any(n in NAMES for n in names):
                check(f"_rtloop.pyi {node.name}", names)
                checked.append(node.name)
    assert {"PositionFields", "cycle", "command"} <= set(checked), checked
