"""One-line user-facing errors of the task zoo (missing data, bad config)."""


class ZooError(ValueError):
    """A configuration or data problem that entry points print as one line, without traceback."""
