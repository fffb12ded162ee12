"""(placeholder) rtloop.sim."""
