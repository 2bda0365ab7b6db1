"""What the ``python -m mara.peers`` subcommands share: a refusal in one line, and the check of a time limit."""

from __future__ import annotations

import sys


def fail(msg: str) -> None:
    """Refuse in one line on stderr, exit 2."""
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def check_limit(seconds: float | None, flag: str) -> None:
    """A time limit is a positive number of seconds (None: the case's or the default); anything else is refused:
    a limit of 0 would read as "no limit" on the peer's side and as an instant cut on ours."""
    if seconds is not None and not seconds > 0:
        fail(f"{flag} must be a positive number of seconds, got {seconds:g}")
