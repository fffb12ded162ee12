"""(placeholder) the agent part of the rtloop package."""

__all__: list = []
