"""rtloop.moteus_transport: the official moteus package's commands through rtloop's native
cycle give what moteus' own Fdcanusb gives, on one bus or several."""

import asyncio
import threading

import pytest

from rtloop import sim

moteus = pytest.importorskip("moteus", reason="moteus==1.1.1 is not installed: pip install moteus==1.1.1")
mt = pytest.importorskip("rtloop.moteus_transport")


def run(coro):
    return asyncio.run(coro)


def values(results):
    return [(r.id, dict(r.values)) for r in results]


def test_same_results_as_moteus_fdcanusb():
    async def through(make_transport):
        transport = make_transport()
        try:
            cs = [moteus.Controller(i, transport=transport) for i in (1, 2, 3)]
            queried = await transport.cycle([c.make_query() for c in cs])
            stopped = await transport.cycle([c.make_stop(query=True) for c in cs])
            one = await cs[1].query()
            custom = await cs[2].execute(cs[2].make_query(query_override=moteus.QueryResolution()))
            return queried, stopped, one, custom
        finally:
            transport.close()

    # A fresh simulator each: both see servos at rest, whose replies do not depend on time.
    with sim.fdcanusb(servos=[1, 2, 3], instant=True) as path:
        theirs = run(through(lambda: moteus.Fdcanusb(path)))
    with sim.fdcanusb(servos=[1, 2, 3], instant=True) as path:
        ours = run(through(lambda: mt.Transport(buses={1: f"fdcanusb:{path}"}, servos={1: [1, 2, 3]})))
    for mine, official in zip(ours[:2], theirs[:2]):
        assert len(mine) == 3
        assert values(mine) == values(official)
    assert (ours[2].id, dict(ours[2].values)) == (theirs[2].id, dict(theirs[2].values))
    assert dict(ours[3].values) == dict(theirs[3].values)
    assert all(r.bus == 1 for r in ours[0])


def test_position_commands_move_servos_on_four_buses():
    buses = {b: [3 * b - 2, 3 * b - 1, 3 * b] for b in (1, 2, 3, 4)}
    with sim.serve(buses, instant=True) as s, mt.Transport(buses=s.uris, servos=buses) as t:
        cs = [moteus.Controller(i, transport=t) for i in range(1, 13)]

        async def go():
            last = []
            for _ in range(100):
                last = await t.cycle([c.make_position(position=0.1, velocity=0.0, query=True) for c in cs])
                if all(r.values[moteus.Register.POSITION] > 0.001 for r in last):
                    break
            return last

        results = run(go())
        assert [r.id for r in results] == list(range(1, 13))
        assert [r.bus for r in results] == [b for b in (1, 2, 3, 4) for _ in range(3)]
        assert all(r.values[moteus.Register.MODE] == 10 for r in results)
        assert all(0.0 < r.values[moteus.Register.POSITION] < 0.1 for r in results)
        stats = t.last_cycle
        assert stats["expected"] == 12 and stats["answered"] == 12 and not stats["timed_out"]
        assert all(c["protocol_errors"] == 0 for c in t.counters().values())


def test_in_process_sim_bus_and_a_missing_servo():
    # Servo 5 is routed to bus 1 but not simulated there: its reply never comes.
    with mt.Transport(buses={1: "sim"}, servos={1: [1, 2]}, timeout=0.02) as t:
        cs = [moteus.Controller(i, transport=t) for i in (1, 2)]
        results = run(t.cycle([c.make_query() for c in cs] + [moteus.Controller(5).make_query()]))
        assert [r.id for r in results] == [1, 2]
        assert t.last_cycle["timed_out"] and t.last_cycle["answered"] == 2


def test_write_then_read_and_flush():
    with mt.Transport("sim", [1]) as t:
        c = moteus.Controller(1, transport=t)

        async def go():
            await t.write(c.make_query())
            frame = await asyncio.wait_for(t.read(), 1.0)
            await t.write(c.make_query())
            await t.flush_read_queue(timeout=0.01)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(t.read(), 0.02)
            return frame

        frame = run(go())
        assert isinstance(frame, moteus.Frame)
        assert (frame.arbitration_id >> 8) & 0x7F == 1 and frame.bus == 1
        assert moteus.parse_registers(frame.data).response[int(moteus.Register.MODE)] == 0


def test_diagnostic_stream_works_through_it():
    with sim.fdcanusb(servos=[4]) as path, mt.Transport(f"fdcanusb:{path}") as t:

        async def go():
            stream = moteus.Stream(moteus.Controller(4, transport=t))
            return await stream.command(b"conf get id.id", allow_any_response=True)

        assert run(go()) == b"4"


def test_udp_bus():
    with sim.udp(servos=[7]) as (host, port), mt.Transport(f"udp:{host}:{port}") as t:
        result = run(moteus.Controller(7, transport=t).query())
        assert result.id == 7 and result.values[moteus.Register.MODE] == 0


def test_bad_arguments():
    with pytest.raises(ValueError, match="not a bus number"):
        mt.Transport({0: "sim"})
    with pytest.raises(ValueError, match="bus 1:"):
        mt.Transport({1: "carrier-pigeon:/x"})
    with pytest.raises(
        ValueError, match="timeout=0 is out of range: give a number of seconds above 0, at most 60"
    ):
        mt.Transport("sim", timeout=0.0)
    with pytest.raises(ValueError, match="timeout=NaN is out of range"):
        mt.Transport("sim", timeout=float("nan"))
    with pytest.raises(ValueError, match="servo id 200 is out of range"):
        mt.Transport("sim", [200])
    with pytest.raises(ValueError, match="not in buses"):
        mt.Transport({1: "sim"}, {2: [1]})
    with pytest.raises(ValueError, match="on buses 1 and 2"):
        mt.Transport({1: "sim", 2: "sim"}, {1: [1], 2: [1]})
    with pytest.raises(TypeError, match="must be a string"):
        mt.Transport({1: 5})  # type: ignore[dict-item]
    with pytest.raises(FileNotFoundError, match="/nonexistent/ttyACM9") as e:
        mt.Transport("fdcanusb:/nonexistent/ttyACM9")
    assert e.value.errno == 2
    with mt.Transport({1: "sim", 2: "sim"}, {1: [1], 2: [2]}) as t:
        with pytest.raises(ValueError, match="servo id 9 is on none of the buses"):
            run(t.cycle([moteus.Controller(9).make_query()]))
        with pytest.raises(NotImplementedError):
            run(t.discover())
        uuid_addressed = moteus.Controller(moteus.DeviceAddress(uuid=b"\x01\x02\x03\x04"))
        with pytest.raises(ValueError, match="UUID"):
            run(t.cycle([uuid_addressed.make_query()]))
    with pytest.raises(RuntimeError, match="closed"):
        run(t.cycle([moteus.Controller(1).make_query()]))


def test_a_failed_bus_raises_os_error():
    with sim.fdcanusb(servos=[1]) as path:
        t = mt.Transport(f"fdcanusb:{path}")
    # The simulator is gone: its pty hung up.
    try:
        with pytest.raises(OSError, match="bus 1"):
            for _ in range(3):
                run(t.cycle([moteus.Controller(1).make_query()]))
    finally:
        t.close()


def test_the_cycle_waits_without_the_gil():
    # A reply that never comes keeps the cycle waiting for its whole timeout; Python code in
    # another thread runs meanwhile only if the wait released the GIL.
    with mt.Transport("sim", [1], timeout=1.0) as t:
        entered, done = threading.Event(), threading.Event()

        def cycle():
            entered.set()
            run(t.cycle([moteus.Controller(2).make_query()]))
            done.set()

        worker = threading.Thread(target=cycle)
        worker.start()
        try:
            entered.wait()
            threading.Event().wait(0.1)
            assert not done.is_set(), "Python ran while the cycle waited"
        finally:
            worker.join()
        assert done.is_set() and t.last_cycle["timed_out"]


def test_the_example_runs():
    import pathlib
    import subprocess
    import sys

    example = pathlib.Path(__file__).resolve().parents[1] / "examples" / "moteus_on_sim.py"
    out = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "[moteus.Fdcanusb] after 0.5 s: mode 10" in out.stdout
    assert "[rtloop transport] after 0.5 s: mode 10" in out.stdout
