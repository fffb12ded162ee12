"""A control law in its own Python process beside ``rtloop run --agent NAME``.

The spine (``rtloop run --agent NAME``) publishes every cycle's robot state into the
shared-memory segment ``/dev/shm/rtloop-NAME`` and applies the newest command the agent
wrote there (the protocol: ``docs/agent-protocol.md``). :class:`Agent` is that agent, in
Python::

    import rtloop

    with rtloop.Agent("demo") as agent:
        for state in agent:              # every new state, until the spine ends
            agent.command(position=0.0, velocity=0.0, kp_scale=1.0, kd_scale=1.0,
                          watchdog_timeout=0.1)

Units: positions in revolutions, velocities in rev/s, torques in N·m, times in seconds.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Mapping
from typing import Any, Callable, Iterator, Optional

from . import _rtloop
from ._rtloop import AgentBusy, AgentState, BodyState, ImuState, ProtocolVersionError, SpineGone, SpineNotFound

__all__ = [
    "Agent",
    "AgentState",
    "ImuState",
    "BodyState",
    "SpineNotFound",
    "ProtocolVersionError",
    "AgentBusy",
    "SpineGone",
]

# How long one wait of `Agent.next` runs in its worker thread before it looks whether the
# awaiting task was cancelled, s.
_ASYNC_SLICE_S = 0.05


class Agent(_rtloop.Agent):
    """An agent attached to the spine of ``rtloop run --agent NAME``.

    ``Agent(name, *, wait=5.0, auto_arm=True, busy_poll=None)`` attaches to
    ``/dev/shm/rtloop-NAME``. While the spine is not there yet (or still creating its
    segment) it retries for up to ``wait`` seconds (0 to 86400), with the GIL released.

    Raises:
        ValueError: ``name`` is not 1 to 64 characters of ``A-Z a-z 0-9 _ -``, or ``wait``
            is out of range.
        SpineNotFound: no spine of that name appeared within ``wait`` (a
            ``FileNotFoundError``; ``.filename`` is the segment's path).
        ProtocolVersionError: the spine speaks another protocol version
            (``.spine_version``, ``.agent_version``).
        AgentBusy: another live agent is attached (``.pid``).
        RuntimeError: ``/dev/shm/rtloop-NAME`` is not an rtloop agent segment (wrong magic
            or sizes), or not a regular file at all (e.g. a FIFO another user made there:
            refused at once, never waited on).
        PermissionError: the segment belongs to another user than this process's effective
            user (refused at once, whoever can read it: a spine of yours makes its segment
            yours, mode 0600).
        OSError: the segment cannot be opened or mapped.

    **Arming.** The spine follows an agent only after the agent echoes the arm token it
    publishes — at the start, and again after every timeout (the agent was silent for longer
    than :attr:`timeout`). With ``auto_arm=True`` (the default), :meth:`command` echoes the
    token of the last state this agent read whenever that state says the spine waits to be
    armed (status ``"waiting"`` or ``"safe"``) — what ``examples/agent.c`` does. It stays an
    explicit decision: only a *command* arms, computed by your code after it read a state
    showing the spine waiting, so after a stall the spine is taken back only by a command
    made from a fresh state; :meth:`heartbeat` never arms. With ``auto_arm=False``, call
    :meth:`arm` yourself before the command that should take control.

    **Waiting.** :meth:`wait_next` waits with the GIL released. In a lockstep run it sleeps
    on the spine's bell (a futex in the segment: no CPU at all until the spine publishes a
    state it waits on, however long that takes). In a free-running run it sleeps 20 µs
    between looks. With ``busy_poll=True`` it spins instead (lowest latency, one core kept
    busy — give the agent a core of its own, as a spinning process sharing its core with
    other work loses whole scheduler slices, milliseconds). It checks every 5 ms whether
    the spine is gone (a zombie spine, exited but not yet reaped, counts as gone) and
    every 50 ms for Ctrl-C.

    **Threads.** Every method may be called from any thread; a wait in one thread does not
    block a command from another (``await agent.next()`` runs in a worker thread).

    **A segment truncated under the agent.** Any process of your user can truncate
    ``/dev/shm/rtloop-NAME``; the next access past its new end would kill the process with
    SIGBUS. The agent installs a SIGBUS guard (once per process, chained to any handler
    installed before, Python's faulthandler included) that gives the mapping zero pages
    instead: the agent survives, and :meth:`wait_next` raises :class:`SpineGone` with
    ``.reason`` "lost".

    Closing (:meth:`close`, or leaving a ``with`` block) detaches: another agent may attach.
    """

    def __enter__(self) -> "Agent":
        """Return the agent itself (leaving the ``with`` block closes it)."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Detach from the spine (:meth:`close`)."""
        self.close()

    def __iter__(self) -> Iterator[AgentState]:
        """Yield every new state (as :meth:`wait_next`) until the spine goes away.

        The iteration simply ends when the spine ends, removes its segment or dies; call
        :meth:`state` afterwards for the last state it published.

        Raises:
            SpineGone: with ``.reason`` "lost": another process truncated the segment under
                the agent (the spine ends its run too) — not a run that ended as it should.
        """
        while True:
            try:
                state = self.wait_next()
            except SpineGone as gone:
                if gone.reason == "lost":
                    raise
                return
            if state is not None:
                yield state

    async def next(self, timeout: Optional[float] = None) -> Optional[AgentState]:
        """Await the next state newer than the last one returned (:meth:`wait_next`).

        The wait runs in a worker thread (``asyncio.to_thread``) with the GIL released, so
        the event loop keeps running. Returns ``None`` after ``timeout`` seconds (``None``:
        no bound).

        Raises:
            SpineGone: the spine went away (``.reason``).
            ValueError: ``timeout`` is negative, NaN or longer than a day.

        Cancelling the awaiting task stops the worker within 50 ms; a state it took
        meanwhile is dropped (the next call returns the one after it).
        """
        if timeout is not None and not (math.isfinite(timeout) and 0.0 <= timeout <= 86400.0):
            raise ValueError(
                f"timeout = {timeout} s is out of range: give 0 to 86400 seconds (or None to wait without a bound)"
            )
        cancelled = threading.Event()

        def wait() -> Optional[AgentState]:
            # Bounded slices, so a cancelled wait does not keep a worker thread (and the
            # event loop's shutdown) waiting for a state that may never come.
            deadline = None if timeout is None else time.monotonic() + timeout
            while not cancelled.is_set():
                step = _ASYNC_SLICE_S
                if deadline is not None:
                    step = min(step, max(0.0, deadline - time.monotonic()))
                state = self.wait_next(step)
                if state is not None:
                    return state
                if deadline is not None and time.monotonic() >= deadline:
                    return None
            return None

        try:
            return await asyncio.to_thread(wait)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    def run(
        self,
        callback: Callable[[AgentState], Optional[Mapping[str, Any]]],
        *,
        duration: Optional[float] = None,
    ) -> int:
        """Run a control law: for every new state, ``callback(state)`` says what to send.

        The callback returns a mapping of :meth:`command` keyword arguments (sent as one
        command for that state), or ``None`` to send only a heartbeat (the previous command
        again). The loop ends when the spine goes away, or after ``duration`` seconds
        (``None``: no bound). Returns how many states were handled. A segment lost under the
        agent (another process truncated it) raises :class:`SpineGone` (``.reason`` "lost").

        If the callback raises (or returns something :meth:`command` refuses), nothing more
        is sent and the exception propagates: the spine, no longer hearing from the agent,
        times out after :attr:`timeout` and puts the servos in its ``--agent-on-timeout``
        action (zero velocity by default), reporting an ``agent_timeout`` event — the robot
        is never left without commands.

        Raises:
            TypeError: the callback returned something other than a mapping or ``None``.
            ValueError: ``duration`` is negative, NaN or longer than a day.
        """
        if duration is not None and not (math.isfinite(duration) and 0.0 <= duration <= 86400.0):
            raise ValueError(
                f"duration = {duration} s is out of range: give 0 to 86400 seconds "
                "(or None to run until the spine ends)"
            )
        end = None if duration is None else time.monotonic() + duration
        handled = 0
        while True:
            remaining = None
            if end is not None:
                remaining = end - time.monotonic()
                if remaining <= 0.0:
                    return handled
            try:
                state = self.wait_next(remaining)
            except SpineGone as gone:
                if gone.reason == "lost":
                    raise
                return handled
            if state is None:
                return handled
            cmd = callback(state)
            if cmd is None:
                self.heartbeat()
            elif isinstance(cmd, Mapping):
                self.command(**cmd)
            else:
                raise TypeError(
                    f"the run callback returned a {type(cmd).__name__}; "
                    "return a dict of command() keyword arguments, or None to only heartbeat"
                )
            handled += 1
