"""Result rows of run folders, for the report's sections: a folder (or its ``results.json``) read once and checked
to be the kind of run a section reads, so that a missing or foreign folder is one line, not a traceback.

A run folder holds ``results.json`` with ``rows`` (one dict per method result); a paper-protocol evaluation's rows
carry ``load`` and ``success_rate`` per episode, a trace evaluation's ``window``, ``job_id`` and ``deadline_met``.
"""

from __future__ import annotations

import json
from pathlib import Path

#: the fields every row of a run of each kind has (what the sections read)
PAPER_FIELDS = ("method", "load", "success_rate")
TRACE_FIELDS = ("method", "window", "job_id", "deadline_met")


def results_path(path: str | Path) -> Path:
    """The ``results.json`` of a run folder (or the file itself); FileNotFoundError when there is none."""
    p = Path(path)
    f = p / "results.json" if p.is_dir() else p
    if not f.is_file():
        raise FileNotFoundError(f"{path} is not a run folder: no results.json there")
    return f


def load_results(path: str | Path, fields: tuple[str, ...] = ("method",)) -> dict:
    """A run's results (``rows`` and the rest), each row checked to have ``fields``; ValueError in one line when the
    file is not JSON of that shape (another kind of run, or not a run)."""
    f = results_path(path)
    try:
        data = json.loads(f.read_text())
    except (ValueError, OSError) as exc:
        raise ValueError(f"{f} is not a readable JSON file ({exc})") from None
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{f} holds no result rows (not an evaluation run's results)")
    for r in rows:
        missing = [k for k in fields if not isinstance(r, dict) or k not in r]
        if missing:
            raise ValueError(f"{f}: a row lacks {', '.join(missing)} (not the kind of run this section reads)")
    return data


def load_rows(paths: str, fields: tuple[str, ...] = PAPER_FIELDS) -> list[dict]:
    """The rows of several runs on the same episodes (``paths`` comma-separated), read together."""
    return [r for p in paths.split(",") for r in load_results(p, fields)["rows"]]
