"""rtloop.Agent against a real spine (``rtloop run --agent NAME``): arming and holding the
robot, lockstep, refusals before anything is sent, asyncio, the spine going away, and the
attach errors. Every spine and helper process is killed in ``finally``."""

from __future__ import annotations

import asyncio
import json
import math
import mmap
import os
import pathlib
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

import rtloop

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "agent_hold.py"
HOLD = dict(position=0.0, velocity=0.0, kp_scale=1.0, kd_scale=1.0, watchdog_timeout=0.1)


def unique(tag: str) -> str:
    """A unique agent name per test (segments are system-wide)."""
    return f"py{os.getpid()}-{tag}"


def segment(name: str) -> pathlib.Path:
    return pathlib.Path(f"/dev/shm/rtloop-{name}")


def start_spine(bin_path: str, name: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [bin_path, "run", "--quiet", "--json", "--agent", name, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 30.0) -> tuple[int, dict, str]:
    """Wait for the spine; its exit status, JSON summary and stderr."""
    out, err = proc.communicate(timeout=timeout)
    lines = out.strip().splitlines()
    assert lines, f"the spine printed no summary (exit {proc.returncode}): {err}"
    return proc.returncode, json.loads(lines[-1]), err


def kill(proc: subprocess.Popen) -> None:
    """End a helper process now."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def stop_spine(proc: subprocess.Popen, name: str) -> None:
    """End a spine the way Ctrl-C does (it removes its segment), SIGKILL if it does not
    stop, and remove a segment a killed spine left behind (the name is this test's own)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()
    segment(name).unlink(missing_ok=True)


def kinds(summary: dict) -> list[str]:
    return [e["kind"] for e in summary["events"]]


def test_the_example_agent_arms_and_holds_the_robot_then_exits_when_the_spine_ends(rtloop_bin):
    name = unique("hold")
    # The agent may start first: it waits for the spine.
    agent = subprocess.Popen([sys.executable, str(EXAMPLE), name], stderr=subprocess.PIPE, text=True)
    spine = start_spine(rtloop_bin, name, "--duration", "1.5")
    try:
        code, summary, err = finish(spine)
        assert code == 0, err
        assert summary["status"] == "ok", summary["problems"]
        a = summary["agent"]
        assert a["name"] == name
        assert a["commands_applied"] > 0, a
        assert (a["timeouts"], a["refused"], a["torn"]) == (0, 0, 0), a
        assert kinds(summary) == ["agent_armed", "shutdown"], summary["events"]
        for servo in summary["final"].values():
            assert abs(servo["position"]) < 0.02, servo
        assert agent.wait(timeout=10) == 0, agent.stderr.read()
        assert not segment(name).exists()
    finally:
        stop_spine(spine, name)
        kill(agent)


def test_lockstep_every_cycle_gets_the_agents_command(rtloop_bin):
    name = unique("lockstep")
    spine = start_spine(rtloop_bin, name, "--lockstep", "--no-wire-time", "--duration", "0.5")
    try:
        with rtloop.Agent(name) as agent:
            # In lockstep the agent sleeps on the spine's bell (no busy-polling by default).
            assert agent.lockstep and not agent.busy_poll
            assert agent.servo_count == 12 and agent.rate_hz == 1000.0 and agent.period == pytest.approx(0.001)
            assert list(agent.ids) == list(range(1, 13))
            first = agent.wait_next(timeout=5)
            # The spine measures before it waits: query-only cycles until every servo has
            # answered a cycle's request (one here), so the first state waited on is cycle 1.
            while first is not None and (first.request_cycle < 0).any():
                first = agent.wait_next(timeout=5)
            assert first is not None and first.status == "waiting" and not first.armed
            assert first.cycle == 1 and (first.request_cycle == 0).all() and first.fresh.all()
            # Lockstep: the spine waits for this state's command, so nothing newer comes.
            assert agent.wait_next(timeout=0.05) is None
            cycles = [first.cycle]
            agent.command(**HOLD)

            def hold(state):
                cycles.append(state.cycle)
                return HOLD

            agent.run(hold, duration=20)
        code, summary, err = finish(spine)
        assert code == 0, err
        assert summary["lockstep"] is True
        a = summary["agent"]
        assert a["commands_applied"] == summary["cycles"] - 1, a
        assert a["cycles_without_command"] == 1, "cycle 0 only measured the servos"
        assert a["torn"] == 0, a
        assert cycles == sorted(set(cycles)), "every state is returned once, in order"
    finally:
        stop_spine(spine, name)


def test_a_missing_spine_is_spine_not_found_quickly():
    name = unique("missing")
    t0 = time.monotonic()
    with pytest.raises(rtloop.SpineNotFound) as info:
        rtloop.Agent(name, wait=0.2)
    assert time.monotonic() - t0 < 2.0
    assert isinstance(info.value, FileNotFoundError)
    assert info.value.filename == str(segment(name))
    assert f"rtloop run --agent {name}" in str(info.value)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(name="no/slash"), "agent name"),
        (dict(name=""), "agent name"),
        (dict(name="x" * 65), "agent name"),
        (dict(name="ok", wait=-1.0), "wait"),
        (dict(name="ok", wait=math.nan), "wait"),
        (dict(name="ok", wait=math.inf), "wait"),
    ],
)
def test_bad_arguments_to_attach_are_value_errors(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        rtloop.Agent(**kwargs)


def test_a_callback_that_raises_leaves_the_robot_to_the_spines_timeout_action(rtloop_bin):
    name = unique("raises")
    spine = start_spine(rtloop_bin, name, "--duration", "1.5")
    try:
        with rtloop.Agent(name) as agent:
            handled = []

            def law(state):
                handled.append(state.cycle)
                if len(handled) > 100:
                    raise ZeroDivisionError("the control law failed")
                return HOLD

            with pytest.raises(ZeroDivisionError):
                agent.run(law)
            # Nothing more was sent: the spine times out and applies zero velocity (mode 12).
            deadline = time.monotonic() + 5.0
            state = agent.wait_next(timeout=5)
            while state is not None and not (state.status == "safe" and (state.mode == 12).all()):
                assert time.monotonic() < deadline, state
                state = agent.wait_next(timeout=5)
            assert state is not None and state.timeouts == 1 and not state.armed
        code, summary, err = finish(spine)
        assert code == 1, err
        assert "agent_timeout" in kinds(summary), summary["events"]
        assert summary["agent"]["timeouts"] == 1
        assert "the agent went silent" in " ".join(summary["problems"])
    finally:
        stop_spine(spine, name)


def test_bad_commands_raise_before_anything_is_sent(rtloop_bin):
    name = unique("refuse")
    spine = start_spine(rtloop_bin, name, "--duration", "1")
    try:
        with rtloop.Agent(name) as agent:
            n = agent.servo_count
            agent.wait_next(timeout=5)
            beat = agent.command(**HOLD)
            bad = [
                (ValueError, "velocity is NaN", dict(velocity=math.nan)),
                (ValueError, "position is inf", dict(position=math.inf)),
                (ValueError, r"velocity 30 is outside the allowed range -20 to 20", dict(velocity=30.0)),
                (ValueError, "watchdog_timeout", dict(watchdog_timeout=0.0)),
                (ValueError, "maximum_torque -1 is below 0", dict(maximum_torque=-1.0)),
                (ValueError, r"servo 3 \(id 4\): kp_scale", dict(kp_scale=np.array([1, 1, 1, 2] + [1] * (n - 4)))),
                (ValueError, rf"position has 3 values .* shape \({n},\)", dict(position=np.zeros(3))),
                (ValueError, rf"position has 5 values .* shape \({n},\)", dict(position=[0.0] * 5)),
                (ValueError, rf"shape \(2, {n}\)", dict(position=np.zeros((2, n)))),
                (TypeError, "dtype", dict(position=np.zeros(n, dtype=complex))),
                (TypeError, "dtype", dict(position=np.array(["a"] * n))),
                (TypeError, rf"shape \({n},\)", dict(position="0.0")),
                (TypeError, rf"shape \({n},\)", dict(position=True)),
                (TypeError, rf"shape \({n},\)", dict(position={"a": 1})),
                (ValueError, "kind .dance. is unknown", dict(kind="dance")),
                (ValueError, f"kind has 2 names .* {n} servos", dict(kind=["stop", "brake"])),
                (TypeError, "kind must be", dict(kind=3)),
                (ValueError, 'only with kind "position"', dict(kind="stop", velocity=0.0)),
            ]
            for error, message, kwargs in bad:
                with pytest.raises(error, match=message):
                    agent.command(**kwargs)
            # Nothing was written: the next heartbeat is the one after the last command.
            assert agent.heartbeat() == beat + 1
            # What is fine: per-servo arrays of any real dtype, lists, NaN position (hold),
            # per-servo kinds.
            assert (
                agent.command(position=np.zeros(n, dtype=np.float32), kp_scale=np.ones(n, dtype=np.int64)) == beat + 2
            )
            assert agent.command(position=[0.0] * n, velocity=np.float64(0.0), watchdog_timeout=0.1) == beat + 3
            assert agent.command(position=math.nan, watchdog_timeout=0.1) == beat + 4
            assert agent.command(kind=["position"] * (n - 1) + ["zero_velocity"], position=0.0) == beat + 5
            assert agent.command(kind="query") == beat + 6
            for state in agent:
                agent.command(**HOLD)
        code, summary, err = finish(spine)
        assert code == 0, err
        assert summary["agent"]["refused"] == 0, summary["agent"]
    finally:
        stop_spine(spine, name)


def test_await_next_under_asyncio_and_spine_gone_when_it_ends(rtloop_bin):
    name = unique("async")
    spine = start_spine(rtloop_bin, name, "--duration", "0.5")
    try:
        with rtloop.Agent(name) as agent:

            async def main():
                ticks = 0

                async def ticker():
                    nonlocal ticks
                    while True:
                        ticks += 1
                        await asyncio.sleep(0.001)

                tick = asyncio.create_task(ticker())
                states = []
                try:
                    while True:
                        state = await agent.next(timeout=5)
                        assert state is not None
                        states.append(state)
                        agent.command(**HOLD)
                except rtloop.SpineGone as gone:
                    assert gone.reason in ("ended", "unlinked"), gone.reason
                finally:
                    tick.cancel()
                return states, ticks

            states, ticks = asyncio.run(main())
            assert len(states) > 10
            assert all(b.cycle > a.cycle for a, b in zip(states, states[1:]))
            assert ticks > 10, "the event loop kept running while next() waited"
            assert any(s.armed for s in states)
            # Once gone, every wait says so at once, and the last state stays readable.
            with pytest.raises(rtloop.SpineGone):
                agent.wait_next(timeout=1)
            assert agent.state().status == "ended"
            assert list(agent) == []
        code, _, err = finish(spine)
        assert code == 0, err
    finally:
        stop_spine(spine, name)


def test_a_killed_spine_is_spine_gone_dead(rtloop_bin):
    name = unique("killed")
    spine = start_spine(rtloop_bin, name, "--duration", "30")
    try:
        with rtloop.Agent(name) as agent:
            assert agent.wait_next(timeout=5) is not None
            spine.send_signal(signal.SIGKILL)
            spine.wait()
            t0 = time.monotonic()
            with pytest.raises(rtloop.SpineGone) as info:
                while agent.wait_next(timeout=5) is not None:
                    pass
            assert info.value.reason == "dead"
            assert time.monotonic() - t0 < 2.0
    finally:
        # SIGKILL left the segment behind (the next spine of that name would replace it).
        stop_spine(spine, name)


def test_one_agent_at_a_time_and_close_lets_the_next_attach(rtloop_bin):
    name = unique("busy")
    spine = start_spine(rtloop_bin, name, "--duration", "30")
    other = None
    try:
        other = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import rtloop, sys, time; a = rtloop.Agent({name!r}); print('on', flush=True); time.sleep(30)",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert other.stdout.readline().strip() == "on"
        with pytest.raises(rtloop.AgentBusy) as info:
            rtloop.Agent(name)
        assert info.value.pid == other.pid
        assert f"pid {other.pid}" in str(info.value)
        kill(other)
        # Its process is gone: its registration is stale, and this agent takes the segment.
        agent = rtloop.Agent(name)
        assert agent.state().status in ("waiting", "following", "safe")
        agent.close()
        assert agent.closed
        with pytest.raises(ValueError, match="closed"):
            agent.state()
        agent.close()  # twice is harmless
        with rtloop.Agent(name) as again:
            assert not again.closed
    finally:
        stop_spine(spine, name)
        if other is not None:
            kill(other)


def fake_segment(name: str, magic: bytes, version: int) -> pathlib.Path:
    """A segment file as a spine of another version (or not a spine) would leave it."""
    path = segment(name)
    data = bytearray(9472)
    data[0:8] = magic
    struct.pack_into("<I", data, 8, version)
    struct.pack_into("<i", data, 76, os.getpid())  # a live "spine"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, bytes(data))
    finally:
        os.close(fd)
    return path


def test_another_protocol_version_or_a_foreign_file_is_refused():
    name = unique("v5")
    path = fake_segment(name, b"RTLOOPAG", 5)
    try:
        with pytest.raises(rtloop.ProtocolVersionError) as info:
            rtloop.Agent(name, wait=0)
        assert (info.value.spine_version, info.value.agent_version) == (5, 4)
        assert "version 5" in str(info.value) and "this agent 4" in str(info.value)
        # The agent wrote its version where the spine looks for it (offset 84).
        with open(path, "rb") as f:
            assert struct.unpack_from("<I", mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ), 84)[0] == 4
    finally:
        path.unlink(missing_ok=True)
    name = unique("foreign")
    path = fake_segment(name, b"NOTOURS!", 2)
    try:
        with pytest.raises(RuntimeError, match="not an rtloop agent segment"):
            rtloop.Agent(name, wait=0)
    finally:
        path.unlink(missing_ok=True)


def test_a_fifo_planted_under_the_name_is_refused_at_once(rtloop_bin):
    # /dev/shm is world-writable: any local user can make a FIFO under any agent name.
    # Opened without O_NONBLOCK it would hang the spine, and the agent took its 0 bytes for
    # a segment still being created and retried until `wait` ran out.
    name = unique("fifo")
    path = segment(name)
    os.mkfifo(path, 0o666)
    try:
        with pytest.raises(RuntimeError) as info:
            rtloop.Agent(name, wait=0)
        assert not isinstance(info.value, rtloop.SpineNotFound)
        assert str(info.value) == (
            f"/dev/shm/rtloop-{name} is a FIFO (named pipe), not a regular file; "
            "remove it if it is yours, or use another agent name"
        )
        spine = start_spine(rtloop_bin, name, "--duration", "1")
        try:
            _, err = spine.communicate(timeout=60)
        finally:
            kill(spine)
        assert spine.returncode != 0
        assert f"/dev/shm/rtloop-{name} exists but is a FIFO (named pipe), not a regular file" in err, err
        assert path.is_fifo(), "left alone"
    finally:
        path.unlink(missing_ok=True)


def test_bench_rows(rtloop_bin):
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "bench"))
    try:
        import bench_agent
    finally:
        sys.path.pop(0)
    rows = bench_agent.main(["--rtloop-bin", rtloop_bin, "--seconds", "0.3"])
    assert rows and all(set(r) == {"what", "value", "unit", "detail"} for r in rows)
    assert all(isinstance(r["value"], float) and not r["value"] < 0 for r in rows), rows
    # Lockstep always has its cycles (every one waits for the agent); the free-running rows
    # depend on how many states a loaded machine delivers, so only their form is checked.
    by_what = {r["what"]: r for r in rows}
    assert 0 < by_what["agent round trip p50 (lockstep)"]["value"] < math.inf
    assert by_what["lockstep steps/s"]["value"] > 0


def test_ctrl_c_interrupts_a_wait(rtloop_bin):
    name = unique("sigint")
    # Lockstep: at its first measured state the spine waits for the agent (up to
    # --agent-wait, 60 s), so wait_next waits; SIGINT must still reach Python as
    # KeyboardInterrupt.
    spine = start_spine(rtloop_bin, name, "--lockstep", "--duration", "30")
    code = (
        "import rtloop, sys\n"
        f"a = rtloop.Agent({name!r})\n"
        "s = a.wait_next()\n"
        "while (s.request_cycle < 0).any():\n"
        "    s = a.wait_next()\n"
        "try:\n"
        "    print('waiting', flush=True)\n"
        "    a.wait_next()\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(42)\n"
    )
    agent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert agent.stdout.readline().strip() == "waiting"
        time.sleep(0.2)  # let it enter the wait (it waits 50 ms at most between looks for signals)
        agent.send_signal(signal.SIGINT)
        assert agent.wait(timeout=5) == 42
    finally:
        kill(agent)
        stop_spine(spine, name)


def test_without_auto_arm_commands_are_ignored_until_arm(rtloop_bin):
    name = unique("manual")
    spine = start_spine(rtloop_bin, name, "--duration", "1")
    try:
        with rtloop.Agent(name, auto_arm=False) as agent:
            assert not agent.auto_arm
            for _ in range(30):
                state = agent.wait_next(timeout=5)
                assert state is not None and state.status == "waiting", state
                agent.command(**HOLD)
            assert agent.arm() is True
            assert agent.arm() is False, "the token is echoed already"
            agent.command(**HOLD)
            state = agent.wait_next(timeout=5)
            while state is not None and not state.armed:
                state = agent.wait_next(timeout=5)
            assert state is not None and state.rearms == 1
            for _ in agent:
                agent.command(**HOLD)
        code, summary, err = finish(spine)
        assert code == 0, err
        assert kinds(summary) == ["agent_armed", "shutdown"], summary["events"]
    finally:
        stop_spine(spine, name)


@pytest.mark.parametrize("regrow", [False, True], ids=["truncated", "regrown"])
def test_a_segment_truncated_under_the_agent_is_spine_gone_lost_and_the_spine_ends_safe(rtloop_bin, regrow):
    # Any process of the user can truncate /dev/shm/rtloop-NAME (`open(path, "w")` does):
    # the agent's next access past the new end raised SIGBUS and killed this interpreter,
    # and the spine died the same way. The guard keeps both alive, and both say so.
    name = unique("trunc-regrown" if regrow else "trunc")
    spine = start_spine(rtloop_bin, name, "--duration", "30")
    try:
        with rtloop.Agent(name) as agent:
            seen = 0
            with pytest.raises(rtloop.SpineGone) as info:
                for state in agent:
                    agent.command(**HOLD)
                    seen += 1
                    if seen == 50:
                        open(segment(name), "w").close()
                        if regrow:
                            os.truncate(segment(name), 9472)
            assert info.value.reason == "lost"
            assert str(info.value) == (
                f"/dev/shm/rtloop-{name} was truncated (or replaced) by another process, so the spine ends its run; "
                f"never write to /dev/shm/rtloop-{name} while a spine runs"
            )
        code, summary, err = finish(spine)
        assert code == 1, err
        assert kinds(summary) == ["agent_armed", "agent_segment_lost", "shutdown"], summary["events"]
        # Regrown, the spine may have looked between the truncation and the regrowth (a loaded
        # machine leaves this process off the CPU there): either is the truth it saw.
        expected = ("replaced", "truncated") if regrow else ("truncated",)
        assert summary["agent"]["segment_lost"] in expected
        assert summary["problems"][0].startswith(f"the agent segment /dev/shm/rtloop-{name} was truncated"), summary
        assert all(s["commanded"] == "zero-velocity" for s in summary["final"].values()), summary["final"]
        assert err.strip().splitlines()[-1] == f"rtloop run: {summary['problems'][0]}"
        assert not segment(name).exists(), "the spine removes its file"
    finally:
        stop_spine(spine, name)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to give a segment to user nobody")
def test_a_segment_of_another_user_is_refused_with_permission_error(rtloop_bin):
    # Another user's /dev/shm/rtloop-NAME (here: a live spine's, given to nobody) is never a
    # segment of a spine of ours: root could read and arm it, and did.
    import pwd

    try:
        nobody = pwd.getpwnam("nobody")
        uid, gid, owner = nobody.pw_uid, nobody.pw_gid, f"user nobody (uid {nobody.pw_uid})"
    except KeyError:
        uid, gid, owner = 65534, 65534, "uid 65534"
    name = unique("nobody")
    spine = start_spine(rtloop_bin, name, "--duration", "30")
    try:
        deadline = time.monotonic() + 30
        while not (segment(name).exists() and segment(name).stat().st_size == 9472):
            assert time.monotonic() < deadline, "the spine made no segment"
            time.sleep(0.01)
        os.chown(segment(name), uid, gid)
        with pytest.raises(PermissionError) as info:
            rtloop.Agent(name, wait=0)
        assert str(info.value).startswith(
            f"[Errno 13] /dev/shm/rtloop-{name} belongs to {owner}, not to this agent's user (uid 0); "
            "attach only to a spine your own user runs, or use another agent name"
        ), str(info.value)
        with open(segment(name), "rb") as f:
            assert struct.unpack_from("<i", f.read(88), 80)[0] == 0, "it never registered"
    finally:
        stop_spine(spine, name)
