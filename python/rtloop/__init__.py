"""rtloop from Python: rtloop's real-time moteus stack, at rtloop's speed.

* :class:`Robot` -- one call commands and queries every servo of a robot (the simulated
  12-servo quadruped by default, or fdcanusb/SocketCAN/UDP buses), states out as numpy arrays.
* :class:`Agent` -- a control law in its own Python process beside ``rtloop run --agent NAME``,
  over the spine's shared memory.
* :mod:`rtloop.tlog` -- TLOG0003 logs (rtloop's and mjlib's) into numpy arrays and pandas.
* :mod:`rtloop.sim` -- the simulator behind a pseudo-terminal or UDP, for code that uses the
  official ``moteus`` package.
* :mod:`rtloop.frame` -- ``rtloop frame encode/decode`` as functions.

Every wait runs with the GIL released; bad input raises an exception whose message says what
is wrong and how to fix it.
"""

from ._rtloop import __version__
from . import frame, sim, tlog
from .agent import *  # noqa: F401,F403
from .agent import __all__ as _agent_all
from .robot import *  # noqa: F401,F403
from .robot import __all__ as _robot_all

__all__ = ["__version__", "frame", "sim", "tlog", *_robot_all, *_agent_all]

try:  # a package built with its renderer (feature `render`: docs/gym.md)
    from ._rtloop import Renderer, RenderUnavailable  # noqa: F401

    __all__ += ["Renderer", "RenderUnavailable"]
except ImportError:
    pass
