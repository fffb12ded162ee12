"""Type stubs of the native extension ``rtloop._rtloop`` (users import from ``rtloop``)."""

__version__: str

# --- robot (python/src/robot.rs) ---



# --- agent (python/src/agent.rs) ---



# --- tlog (python/src/tlog.rs) ---



# --- sim (python/src/sim.rs) ---



# --- frame (python/src/frame.rs) ---
