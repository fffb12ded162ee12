"""rtloop.sim: the simulator behind a pty or UDP, in-process, driven by the official moteus
package, rtloop's CLI and rtloop's moteus transport; its links are cleaned up and its
arguments checked like `rtloop sim`'s."""

import asyncio
import errno
import os
import subprocess
import threading

import pytest

import rtloop
from rtloop import sim


@pytest.fixture(scope="module")
def moteus():
    return pytest.importorskip("moteus", reason="moteus==1.1.1 is not installed: pip install moteus==1.1.1")


def test_moteus_controller_queries_and_moves_a_servo(moteus):
    async def drive(path):
        transport = moteus.Fdcanusb(path)
        try:
            c = moteus.Controller(2, transport=transport)
            first = await c.query()
            assert first.id == 2
            assert first.values[moteus.Register.MODE] == 0  # stopped at power-up
            assert first.values[moteus.Register.POSITION] == 0.0
            moved = None
            for _ in range(200):
                moved = await c.set_position(position=0.2, velocity=0.0, query=True)
                if moved.values[moteus.Register.POSITION] > 0.01:
                    break
            assert moved.values[moteus.Register.MODE] == 10  # position mode
            assert 0.01 < moved.values[moteus.Register.POSITION] < 0.2
            stopped = await c.set_stop(query=True)
            assert stopped.id == 2
        finally:
            transport.close()

    with sim.fdcanusb(servos=[1, 2]) as path:
        assert os.path.islink(path) and os.readlink(path).startswith("/dev/pts/")
        asyncio.run(drive(path))
    assert not os.path.lexists(path)
    assert not os.path.exists(os.path.dirname(path)), "the private directory is removed too"


def test_link_is_removed_after_an_exception_in_the_block(tmp_path):
    link = tmp_path / "bus1"
    with pytest.raises(KeyError):
        with sim.fdcanusb(servos=[1], path=link) as path:
            assert path == str(link) and os.path.islink(path)
            raise KeyError("boom")
    assert not os.path.lexists(link)
    assert list(tmp_path.iterdir()) == [], "a directory the caller chose is left in place, empty"


def test_an_existing_path_is_refused_and_left_alone(tmp_path):
    regular = tmp_path / "file"
    regular.write_text("mine")
    with pytest.raises(FileExistsError, match="not a symlink") as e:
        with sim.fdcanusb(path=regular):
            pass
    assert e.value.errno == errno.EEXIST and str(regular) in str(e.value)
    assert regular.read_text() == "mine"

    elsewhere = tmp_path / "link"
    os.symlink("/etc/hostname", elsewhere)
    with pytest.raises(FileExistsError, match="did not make"):
        with sim.fdcanusb(path=elsewhere):
            pass
    assert os.readlink(elsewhere) == "/etc/hostname"

    # A running simulator's link is not taken over by a second one.
    with sim.fdcanusb(path=tmp_path / "live") as live:
        target = os.readlink(live)
        with pytest.raises(FileExistsError):
            with sim.fdcanusb(path=live):
                pass
        assert os.readlink(live) == target


def test_a_stale_link_of_a_killed_simulator_is_replaced(tmp_path):
    stale = tmp_path / "stale"
    os.symlink("/dev/pts/999999", stale)  # a pty that does not exist
    with sim.fdcanusb(path=stale) as path:
        assert os.readlink(path) != "/dev/pts/999999"
    assert not os.path.lexists(stale)


def test_missing_directory_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        with sim.fdcanusb(path=tmp_path / "no" / "such" / "bus1"):
            pass
    with pytest.raises(FileNotFoundError, match="config_dir"):
        sim.serve({1: [1]}, config_dir=tmp_path / "missing")


@pytest.mark.parametrize(
    "buses,message",
    [
        ({1: []}, "no servos"),
        ({1: [1, 1]}, "given twice"),
        ({1: [0]}, "out of range"),
        ({1: [128]}, "out of range"),
        ({1: [-3]}, "out of range"),
        ({0: [1]}, "not a bus number"),
        ({256: [1]}, "not a bus number"),
        ({}, "non-empty"),
    ],
)
def test_bad_ids_and_buses_are_value_errors(buses, message):
    with pytest.raises(ValueError, match=message):
        sim.serve(buses)


def test_other_bad_arguments():
    with pytest.raises(ValueError, match="not served"):
        sim.serve({1: [1]}, transport="socketcan")
    with pytest.raises(ValueError, match="allow_remote=True"):
        with sim.udp(host="0.0.0.0"):
            pass
    with pytest.raises(ValueError, match="port 70000 is out of range"):
        with sim.udp(port=70000):
            pass
    with pytest.raises(TypeError, match="servo id must be an integer"):
        sim.serve({1: [1.5]})  # type: ignore[list-item]
    with pytest.raises(TypeError, match="list of ids"):
        sim.serve({1: 3})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="cannot be a path"):
        sim.serve({1: [1]}, paths={1: "bad\0path"})


def test_udp_answers_the_rtloop_cli(rtloop_bin):
    with sim.udp(servos=[1, 2, 3]) as (host, port):
        assert host == "127.0.0.1" and port > 0
        out = subprocess.run(
            [rtloop_bin, "servo", "--transport", f"udp:{host}:{port}", "--id", "2", "--json", "query"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0, out.stderr
        assert '"mode"' in out.stdout


def test_udp_port_in_use_is_an_os_error():
    with sim.udp() as (_, port):
        with pytest.raises(OSError, match="cannot bind"):
            with sim.udp(port=port):
                pass


def test_several_buses_and_the_report(moteus, tmp_path):
    from rtloop.moteus_transport import Transport

    with sim.serve(
        {1: [1, 2], 2: [3], 3: [4]}, transport={1: "fdcanusb", 2: "fdcanusb", 3: "udp"}, instant=True
    ) as s:
        assert set(s.paths) == {1, 2} and set(s.addresses) == {3}
        assert s.uris[3] == f"udp:127.0.0.1:{s.addresses[3][1]}"
        assert s.servos == {1: [1, 2], 2: [3], 3: [4]}
        assert s.running
        with Transport(buses=s.uris, servos=s.servos) as t:

            async def once():
                cs = [moteus.Controller(i, transport=t) for i in (1, 2, 3, 4)]
                return await t.cycle([c.make_query() for c in cs])

            results = asyncio.run(once())
        assert [(r.id, r.bus) for r in results] == [(1, 1), (2, 1), (3, 2), (4, 3)]
    report = s.stop()
    assert not s.running
    assert s.stop() is report, "stop() twice returns the same report"
    by_bus = {e["bus"]: e for e in report["endpoints"]}
    assert by_bus[1]["frames_in"] == 2 and by_bus[1]["frames_out"] == 2
    assert by_bus[2]["frames_in"] == 1 and by_bus[3]["frames_in"] == 1
    assert by_bus[3]["transport"] == "udp"
    assert all(e["protocol_errors"] == 0 for e in report["endpoints"])
    assert [sv["id"] for sv in by_bus[1]["servos"]] == [1, 2]
    assert by_bus[1]["servos"][0]["malformed_frames"] == 0
    assert "frames in" in report["text"]
    for path in s.paths.values():
        assert not os.path.lexists(path)


def test_config_dir_keeps_conf_write(moteus, tmp_path):
    async def conf_write(path):
        transport = moteus.Fdcanusb(path)
        try:
            stream = moteus.Stream(moteus.Controller(1, transport=transport))
            await stream.command(b"conf set servo.default_timeout_s 0.3")
            await stream.command(b"conf write")
        finally:
            transport.close()

    with sim.serve({1: [1]}, config_dir=tmp_path) as s:
        asyncio.run(conf_write(s.paths[1]))
    report = s.stop()
    assert report["endpoints"][0]["configs_stored"] == 1
    stored = (tmp_path / "bus1-servo1.cfg").read_text()
    assert "servo.default_timeout_s 0.3" in stored

    # Loaded again at the next start.
    async def conf_get(path):
        transport = moteus.Fdcanusb(path)
        try:
            stream = moteus.Stream(moteus.Controller(1, transport=transport))
            return await stream.command(b"conf get servo.default_timeout_s", allow_any_response=True)
        finally:
            transport.close()

    with sim.serve({1: [1]}, config_dir=tmp_path) as s:
        assert float(asyncio.run(conf_get(s.paths[1]))) == pytest.approx(0.3)


def test_simulator_serves_while_python_threads_run(moteus):
    # The server is a Rust thread: a Python thread busy the whole time does not stop it.
    stop = threading.Event()
    spins = [0]

    def spin():
        while not stop.is_set():
            spins[0] += 1

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        with sim.fdcanusb(servos=[1], instant=True) as path:

            async def query():
                t = moteus.Fdcanusb(path)
                try:
                    return await moteus.Controller(1, transport=t).query()
                finally:
                    t.close()

            assert asyncio.run(query()).id == 1
    finally:
        stop.set()
        worker.join()
    assert spins[0] > 0


def test_package_exposes_sim():
    assert rtloop.sim is sim
    with sim.serve({1: [1, 2]}) as s:
        assert repr(s).startswith("Simulator(fdcanusb:") and repr(s).endswith("[1, 2], running)")
    assert repr(s).endswith("stopped)")
