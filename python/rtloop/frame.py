"""(placeholder) rtloop.frame."""
