"""(placeholder) the robot part of the rtloop package."""

__all__: list = []
