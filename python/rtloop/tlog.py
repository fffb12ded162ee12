"""(placeholder) rtloop.tlog."""
