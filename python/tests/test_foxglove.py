"""The Foxglove live view, seen by a real WebSocket client: ``rtloop run --foxglove`` and
``rtloop log serve`` speak the Foxglove WebSocket protocol (subprotocol ``foxglove.sdk.v1``,
the renamed ``foxglove.websocket.v1``). A small client here connects, subscribes, counts
messages and validates every payload against the JSON schema its channel advertises; bad
clients (malformed messages, messages over the size limit, binary garbage, unknown channels,
one that never reads, hundreds of connects) are refused or dropped, counted, and the run
completes."""

import asyncio
import json
import socket
import struct
import subprocess
import time

import jsonschema
import pytest
import websockets

SUBPROTOCOL = "foxglove.sdk.v1"
MESSAGE_DATA = 1  # binary opcode of a server's messageData


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(rtloop_bin, *args):
    return subprocess.Popen([rtloop_bin, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def start_run(rtloop_bin, port, *extra, duration=3, every=10):
    return start(
        rtloop_bin, "run", "--foxglove", f"127.0.0.1:{port}", "--duration", str(duration),
        "--foxglove-every", str(every), "--json", *extra,
    )


def finish(proc, timeout=120):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


def foxglove_stats(summary):
    return next(p for p in summary["live"]["publishers"] if p["sink"] == "foxglove")


async def connect(port, **kw):
    """Connect once the server listens (it binds before the run, so this is quick)."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return await websockets.connect(
                f"ws://127.0.0.1:{port}", subprotocols=[SUBPROTOCOL], max_size=None, **kw
            )
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def handshake(ws):
    """serverInfo, then the advertisements: {topic: channel}."""
    info = json.loads(await asyncio.wait_for(ws.recv(), 10))
    assert info["op"] == "serverInfo"
    channels = {}
    while True:
        msg = json.loads(await asyncio.wait_for(ws.recv(), 10))
        if msg["op"] == "advertise":
            for c in msg["channels"]:
                channels[c["topic"]] = c
            if "/cycle" in channels or "/log/" in "".join(channels):
                return info, channels


async def subscribe(ws, channels, topics):
    subs = [{"id": i, "channelId": channels[t]["id"]} for i, t in enumerate(topics)]
    await ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))
    return {i: t for i, t in enumerate(topics)}


async def collect(ws, by_sub, seconds):
    """Every messageData until the server closes or `seconds` pass: [(topic, log_time, payload)]."""
    got = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            m = await asyncio.wait_for(ws.recv(), 0.5)
        except asyncio.TimeoutError:
            continue
        except websockets.ConnectionClosed:
            break
        if isinstance(m, bytes) and m[0] == MESSAGE_DATA:
            sub, log_time = struct.unpack_from("<IQ", m, 1)
            got.append((by_sub[sub], log_time, json.loads(m[13:])))
    return got


def validate_all(got, channels):
    validators = {t: jsonschema.Draft202012Validator(json.loads(channels[t]["schema"])) for t in channels}
    for topic, _, payload in got:
        assert channels[topic]["encoding"] == "json"
        validators[topic].validate(payload)


def check_live_stream(got, channels, every):
    validate_all(got, channels)
    cycles = [p for t, _, p in got if t == "/cycle"]
    assert len(cycles) > 20, len(cycles)
    indices = [c["index"] for c in cycles]
    assert all(i % every == 0 for i in indices), indices[:10]
    assert indices == sorted(set(indices)), "indices increase"
    states = [p for t, _, p in got if t == "/bus/1/servo/2/state"]
    assert len({round(s["position"], 6) for s in states if s["position"] is not None}) > 3, "positions change"
    imu = [p for t, _, p in got if t == "/imu"]
    assert imu and all(abs(sum(v * v for v in p["orientation"].values()) - 1) < 1e-6 for p in imu)
    return cycles


def test_a_live_run_streams_the_cycle_a_servo_and_the_imu(rtloop_bin):
    port = free_port()
    proc = start_run(rtloop_bin, port, duration=3, every=10)

    async def client():
        ws = await connect(port)
        info, channels = await handshake(ws)
        by_sub = await subscribe(ws, channels, ["/cycle", "/bus/1/servo/2/state", "/imu"])
        t0 = time.monotonic()
        got = await collect(ws, by_sub, 30)
        return info, channels, got, time.monotonic() - t0

    info, channels, got, seconds = asyncio.run(client())
    summary = finish(proc)
    fox = foxglove_stats(summary)
    assert {"/cycle", "/imu", "/imu/transform", "/events", "/bus/1/servo/1/state", "/bus/4/servo/12/command"} <= set(channels)
    assert channels["/imu/transform"]["schemaName"] == "foxglove.FrameTransform"
    assert channels["/events"]["schemaName"] == "foxglove.Log"
    cycles = check_live_stream(got, channels, every=10)
    # Every decimated cycle from our first on reached us (at most first/10 were handed to
    # the server before it): none lost on the way. (Indices skip the periods a loaded
    # machine overran, so they are not all there.)
    first = cycles[0]["index"]
    assert fox["cycles"] - first // 10 <= len(cycles) <= fox["cycles"], (len(cycles), first, fox)
    rate = len(cycles) / seconds
    print(f"/cycle: {len(cycles)} messages in {seconds:.2f} s ({rate:.0f}/s; loop {summary['rate_hz']:.0f} Hz / 10)")
    # The loop's own rate divided by the decimation, within a loaded machine's tolerance.
    assert 0.3 * summary["rate_hz"] / 10 < rate < 1.5 * summary["target_rate_hz"] / 10
    assert fox["dropped"] == 0 and fox["refused"] == 0 and fox["errors"] == 0
    assert fox["detail"]["clients_connected"] == 1 and fox["detail"]["subscriptions"] == 3


def test_a_taken_port_is_refused_before_the_run(rtloop_bin):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        ran = subprocess.run(
            [rtloop_bin, "run", "--foxglove", f"127.0.0.1:{port}", "--duration", "1"],
            capture_output=True, text=True, timeout=60,
        )
    assert ran.returncode == 2
    assert f"127.0.0.1:{port}" in ran.stderr and "port is taken" in ran.stderr
    remote = subprocess.run([rtloop_bin, "run", "--foxglove", "0.0.0.0:0", "--duration", "1"],
                            capture_output=True, text=True, timeout=60)
    assert remote.returncode == 2 and "--allow-remote" in remote.stderr


# ---- Bad input: a lockstep run (no overruns, no missing replies by construction) long
# enough (tens of seconds simulated, several of wall time) for the attack to happen in it.

LOCKSTEP = ("--lockstep",)


def check_loop_unmoved(summary):
    assert summary["status"] == "ok"
    assert summary["overruns"] == 0 and summary["missing_replies"] == 0
    assert summary["cycles"] == 60000


def bad_run(rtloop_bin, attack, every=10):
    port = free_port()
    proc = start_run(rtloop_bin, port, *LOCKSTEP, duration=60, every=every)
    asyncio.run(attack(port))
    summary = finish(proc)
    check_loop_unmoved(summary)
    fox = foxglove_stats(summary)
    assert fox["errors"] == 0, fox
    return fox


def test_malformed_text_messages_are_refused_and_counted(rtloop_bin):
    async def attack(port):
        ws = await connect(port)
        await handshake(ws)
        for text in ["not json", json.dumps({"op": "noSuchOp"}), json.dumps({"op": "subscribe"}), "[1, 2"]:
            await ws.send(text)
        await ws.send(json.dumps({"op": "subscribe", "subscriptions": [{"id": 0, "channelId": "x"}]}))
        await asyncio.sleep(0.5)
        await ws.close()

    fox = bad_run(rtloop_bin, attack)
    assert fox["detail"]["refused_malformed"] == 5, fox
    assert fox["refused"] == 5


def test_messages_over_the_limit_close_the_connection_and_are_counted(rtloop_bin):
    """A client message over 64 KiB (the protocol's are a few hundred bytes) closes its
    connection with code 1009 before it is buffered; the next client is served as ever."""
    closes = []

    async def attack(port):
        for text in ["{" * 100000, "x" * (1 << 20)]:
            ws = await connect(port)
            await handshake(ws)
            try:
                # The server may close while the message is still being sent.
                await ws.send(text)
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
            except websockets.ConnectionClosed as e:
                closes.append(e.rcvd.code if e.rcvd else None)

    fox = bad_run(rtloop_bin, attack)
    assert closes == [1009, 1009], closes
    assert fox["detail"]["refused_too_large"] == 2, fox
    assert fox["refused"] == 2


def test_binary_garbage_is_refused_and_counted(rtloop_bin):
    async def attack(port):
        ws = await connect(port)
        await handshake(ws)
        # Two opcodes the protocol does not have (255, 0); a client publish and a service
        # call, which this server does not offer.
        for blob in [b"\xff\x00\x01", bytes(range(256)) * 100, b"\x01", b"\x02" + b"\x00" * 3]:
            await ws.send(blob)
        await asyncio.sleep(0.5)
        await ws.close()

    fox = bad_run(rtloop_bin, attack)
    assert fox["detail"]["refused_malformed"] == 2, fox
    assert fox["detail"]["refused_unsupported"] == 2, fox


def test_subscriptions_to_unknown_channels_are_refused_and_counted(rtloop_bin):
    async def attack(port):
        ws = await connect(port)
        _, channels = await handshake(ws)
        known = max(c["id"] for c in channels.values())
        subs = [{"id": i, "channelId": known + 1000 + i} for i in range(5)]
        await ws.send(json.dumps({"op": "subscribe", "subscriptions": subs}))
        await ws.send(json.dumps({"op": "unsubscribe", "subscriptionIds": [77]}))
        await asyncio.sleep(0.5)
        await ws.close()

    fox = bad_run(rtloop_bin, attack)
    assert fox["detail"]["refused_unknown_channel"] == 5, fox
    assert fox["detail"]["refused_other"] == 1, fox  # the unknown subscription id
    assert fox["detail"]["subscriptions"] == 0


def test_a_client_that_never_reads_is_dropped_from_and_counted(rtloop_bin):
    """Subscribed to everything at every cycle, it never reads: its queue fills and drops,
    counted message by message, and the run completes on time."""

    async def attack(port):
        ws = await connect(port, max_queue=1)
        _, channels = await handshake(ws)
        await subscribe(ws, channels, sorted(channels))
        await asyncio.sleep(12)  # never read again
        ws.transport.abort()

    t0 = time.monotonic()
    fox = bad_run(rtloop_bin, attack, every=1)
    print(f"never-reading client: run and attack took {time.monotonic() - t0:.1f} s; {fox}")
    assert fox["detail"]["client_queue_dropped"] >= 1, fox
    assert fox["dropped"] >= fox["detail"]["client_queue_dropped"], fox
    assert fox["messages"] > 100000


def test_hundreds_of_connects_and_disconnects(rtloop_bin):
    async def attack(port):
        for _ in range(300):
            ws = await connect(port)
            await ws.close()

    fox = bad_run(rtloop_bin, attack)
    assert fox["detail"]["clients_connected"] == 300, fox
    assert fox["detail"]["clients_disconnected"] == 300, fox
    assert fox["refused"] == 0


# ---- rtloop log serve: the same channels and payloads from a log.


def test_log_serve_plays_a_lockstep_log_on_the_live_channels(rtloop_bin, tmp_path):
    log = tmp_path / "run.tlog"
    ran = subprocess.run([rtloop_bin, "run", "--lockstep", "--duration", "5", "--log", str(log), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    # The same cycles live, from a lockstep run (the same inputs give the same cycles).
    port = free_port()
    live = start_run(rtloop_bin, port, *LOCKSTEP, duration=30, every=10)

    async def live_client():
        ws = await connect(port)
        _, channels = await handshake(ws)
        by_sub = await subscribe(ws, channels, ["/cycle", "/bus/1/servo/2/state", "/imu"])
        return channels, await collect(ws, by_sub, 60)

    live_channels, live_got = asyncio.run(live_client())
    finish(live)

    port = free_port()
    serve = start(rtloop_bin, "log", "serve", str(log), "--foxglove", f"127.0.0.1:{port}", "--speed", "2",
                  "--foxglove-every", "1", "--exit-at-end", "--json")

    async def serve_client():
        ws = await connect(port)
        info, channels = await handshake(ws)
        by_sub = await subscribe(ws, channels, ["/cycle", "/bus/1/servo/2/state", "/imu"])
        return info, channels, await collect(ws, by_sub, 60)

    info, channels, got = asyncio.run(serve_client())
    out, err = serve.communicate(timeout=60)
    assert serve.returncode == 0, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert "playbackControl" in info["capabilities"]
    for t in ["/cycle", "/imu", "/bus/1/servo/2/state", "/events"]:
        assert channels[t]["schema"] == live_channels[t]["schema"], t
    cycles = check_live_stream(got, channels, every=1)
    logged = json.loads(ran.stdout.strip().splitlines()[-1])
    total = logged["cycles"] + logged["shutdown_cycles"]
    assert len(cycles) == total and cycles[0]["index"] == 0, (len(cycles), total)
    assert report["cycles"] == total and report["problems"] == []
    assert report["foxglove"]["dropped"] == 0 and report["foxglove"]["refused"] == 0
    # Same payloads as the live run for the same cycle (its decimated ones).
    live_by_index = {}
    for t, _, p in live_got:
        key = (t, p["index"]) if t == "/cycle" else None
        if key:
            live_by_index[key] = p
    served = {p["index"]: p for t, _, p in got if t == "/cycle"}
    common = [i for (t, i) in live_by_index if i in served]
    assert len(common) > 50
    for i in common:
        a, b = dict(live_by_index[("/cycle", i)]), dict(served[i])
        # Timing in lockstep is the host's: only the cycle's facts must agree.
        for k in ("wakeup_us", "cycle_us"):
            a.pop(k), b.pop(k)
        assert a == b, i
    live_states = [p for t, _, p in live_got if t == "/bus/1/servo/2/state"]
    served_states = [p for t, _, p in got if t == "/bus/1/servo/2/state"]
    assert live_states[0] in served_states


PLAYBACK_STATE = 5  # binary opcode of a server's playbackState
PLAYBACK_CONTROL_REQUEST = 3  # binary opcode of a client's playbackControlRequest


def lockstep_log(rtloop_bin, tmp_path, seconds):
    log = tmp_path / "run.tlog"
    ran = subprocess.run([rtloop_bin, "run", "--lockstep", "--duration", str(seconds), "--log", str(log), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return log, json.loads(ran.stdout.strip().splitlines()[-1])


def test_log_serve_decimates_as_a_live_run_and_waits_for_the_subscriptions_to_settle(rtloop_bin, tmp_path):
    """By default a played log sends every 10th cycle, as `rtloop run --foxglove` does live;
    a layout subscribing channel by channel (here /imu a moment after /cycle) gets all of
    them from the log's first cycle."""
    log, logged = lockstep_log(rtloop_bin, tmp_path, 3)
    port = free_port()
    serve = start(rtloop_bin, "log", "serve", str(log), "--foxglove", f"127.0.0.1:{port}", "--speed", "4",
                  "--exit-at-end", "--json")

    async def client():
        ws = await connect(port)
        _, channels = await handshake(ws)
        by_sub = {0: "/cycle", 1: "/imu"}
        await ws.send(json.dumps({"op": "subscribe", "subscriptions": [{"id": 0, "channelId": channels["/cycle"]["id"]}]}))
        await asyncio.sleep(0.1)
        await ws.send(json.dumps({"op": "subscribe", "subscriptions": [{"id": 1, "channelId": channels["/imu"]["id"]}]}))
        return channels, await collect(ws, by_sub, 60)

    channels, got = asyncio.run(client())
    out, err = serve.communicate(timeout=60)
    assert serve.returncode == 0, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    validate_all(got, channels)
    cycles = [(t, p) for topic, t, p in got if topic == "/cycle"]
    imu = [t for topic, t, _ in got if topic == "/imu"]
    total = logged["cycles"] + logged["shutdown_cycles"]
    indices = [p["index"] for _, p in cycles]
    assert indices == list(range(0, total, 10)), indices[:20]
    assert report["every"] == 10 and report["cycles"] == len(indices)
    assert report["cycles"] + report["decimated"] == total, report
    # The late subscription missed nothing: /imu starts with the first cycle too.
    assert imu[0] == cycles[0][0], (imu[0], cycles[0][0])
    assert len(imu) == len(cycles)


def test_log_serve_answers_a_refused_speed_with_a_status(rtloop_bin, tmp_path):
    """A playbackControlRequest with a speed out of range (0, 5000) is answered: the
    playback state (speed unchanged) and a warning status saying why."""
    log, _ = lockstep_log(rtloop_bin, tmp_path, 1)
    port = free_port()
    serve = start(rtloop_bin, "log", "serve", str(log), "--foxglove", f"127.0.0.1:{port}", "--speed", "0.5",
                  "--loop", "--json")

    def request(speed, request_id):
        rid = request_id.encode()
        return (struct.pack("<BBfBQI", PLAYBACK_CONTROL_REQUEST, 0, speed, 0, 0, len(rid)) + rid)

    async def client():
        ws = await connect(port)
        await handshake(ws)
        answers = {}
        for speed, rid in [(0.0, "zero"), (5000.0, "fast")]:
            await ws.send(request(speed, rid))
            state, status = None, None
            end = time.monotonic() + 30
            while (state is None or status is None) and time.monotonic() < end:
                try:
                    m = await asyncio.wait_for(ws.recv(), 1)
                except asyncio.TimeoutError:
                    continue
                if isinstance(m, bytes) and m[0] == PLAYBACK_STATE:
                    _, _, _, spd, _, n = struct.unpack_from("<BBQfBI", m, 0)
                    if m[19:19 + n].decode() == rid:
                        state = spd
                elif isinstance(m, str) and json.loads(m)["op"] == "status":
                    status = json.loads(m)
            answers[rid] = (state, status)
        await ws.close()
        return answers

    answers = asyncio.run(client())
    serve.send_signal(2)  # Ctrl-C
    out, err = serve.communicate(timeout=60)
    report = json.loads(out.strip().splitlines()[-1])
    for rid, speed in [("zero", "0"), ("fast", "5000")]:
        state, status = answers[rid]
        assert state == 0.5, answers
        assert status is not None, f"no status for the refused speed {speed}: {answers}"
        assert status["level"] == 1 and f"playback speed {speed} refused" in status["message"], status
    assert report["refused_requests"] == 2
    assert report["foxglove"]["refused"] == 2


def test_log_serve_plays_a_damaged_log_as_far_as_it_goes(rtloop_bin, tmp_path):
    log = tmp_path / "run.tlog"
    ran = subprocess.run([rtloop_bin, "run", "--lockstep", "--duration", "3", "--log", str(log)],
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    data = log.read_bytes()
    cut = tmp_path / "cut.tlog"
    cut.write_bytes(data[: len(data) * 2 // 3])
    port = free_port()
    serve = start(rtloop_bin, "log", "serve", str(cut), "--foxglove", f"127.0.0.1:{port}", "--speed", "10",
                  "--exit-at-end", "--json")

    async def client():
        ws = await connect(port)
        _, channels = await handshake(ws)
        by_sub = await subscribe(ws, channels, ["/cycle"])
        return await collect(ws, by_sub, 60)

    got = asyncio.run(client())
    out, err = serve.communicate(timeout=60)
    assert serve.returncode == 0, err[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert 0 < report["cycles"] < 3000
    assert any(p["kind"] == "truncated" for p in report["problems"]), report["problems"]
    assert len(got) == report["cycles"]
    assert "warning" in err


@pytest.mark.parametrize("args, words", [
    (["--speed", "0"], "--speed"),
    (["--speed", "nan"], "--speed"),
    (["--start", "-1"], "--start"),
    (["--start", "2", "--end", "1"], "--end"),
    (["--foxglove", "0.0.0.0:0"], "--allow-remote"),
])
def test_log_serve_refuses_bad_options_in_one_sentence(rtloop_bin, tmp_path, args, words):
    log = tmp_path / "run.tlog"
    subprocess.run([rtloop_bin, "run", "--lockstep", "--duration", "0.1", "--log", str(log)],
                   capture_output=True, text=True, timeout=120, check=True)
    ran = subprocess.run([rtloop_bin, "log", "serve", str(log), *args], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 2
    assert words in ran.stderr and len(ran.stderr.strip().splitlines()) == 1, ran.stderr
