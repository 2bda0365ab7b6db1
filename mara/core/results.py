"""A run folder's ``results.json``, merged by method, in an evaluation folder and in a trace-replay folder alike.

Rows of the methods a run does not evaluate are kept with their settings; a method the run lists is kept when its own
settings (``method_overrides`` of an evaluation, ``method_settings`` of a trace replay; checkpoint contents) are the
ones it was evaluated with (``eval.resume``, default true). Results of another protocol or bank are moved aside to
``results.superseded-<time>.json``, never silently replaced. A folder whose results are of another kind (an
evaluation's where a trace replay writes, or the reverse) is refused before any work (one line): the two kinds share
no rows, so neither run may write over the other's.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from mara.core.config import ConfigError
from mara.core.rundir import free_path, time_stamp
from mara.core.runlog import log

RESULT_NEUTRAL_KEYS = ("workers",)  # method settings that change how fast a method runs, not its rows


def _neutral(overrides: dict) -> dict:
    """Per-method overrides without the settings that cannot change the rows (and without empty entries)."""
    kept = {m: {k: v for k, v in (o or {}).items() if k not in RESULT_NEUTRAL_KEYS} for m, o in overrides.items()}
    return {m: o for m, o in kept.items() if o}


def _paths_in(x) -> list[str]:
    if isinstance(x, dict):
        return [p for k, v in x.items() for p in ([v] if k == "ckpt_path" and isinstance(v, str) else _paths_in(v))]
    if isinstance(x, list):
        return [p for v in x for p in _paths_in(v)]
    return []


def checkpoint_digests(overrides: dict) -> dict:
    """{method: {checkpoint path: sha256 prefix}} of every ``ckpt_path`` in the methods' overrides: a method's rows
    depend on what its checkpoints hold, not only on their paths."""
    out = {}
    for m, o in overrides.items():
        files = [p for p in _paths_in(o) if Path(p).is_file()]
        if files:
            out[m] = {p: hashlib.sha256(Path(p).read_bytes()).hexdigest()[:16] for p in files}
    return out


@dataclass
class EarlierResults:
    """What a folder's ``results.json`` already holds, split for this run: ``done`` ({method: rows}) are this run's
    methods evaluated with their present settings (reused); ``other`` rows belong to methods this run does not list
    (kept as they are, with their settings and notes)."""

    done: dict = field(default_factory=dict)
    other: list = field(default_factory=list)
    overrides: dict = field(default_factory=dict)
    digests: dict = field(default_factory=dict)
    notes: dict = field(default_factory=lambda: {"skipped": {}, "failed": {}})

    def merged(self, rows: list, skipped: dict, failed: dict, overrides: dict, digests: dict) -> dict:
        """This run's rows and notes merged with the other methods' (results.json fields)."""
        return {
            "rows": self.other + rows,
            "method_overrides": {**self.overrides, **overrides},
            "checkpoint_digests": {**self.digests, **digests},
            "skipped": {**self.notes["skipped"], **skipped},
            "failed": {**self.notes["failed"], **failed},
        }


#: the kind of run a results.json holds: its ``kind`` field (a trace replay writes ``trace``); an evaluation's file
#: (``schema: mara.results/1``, the prediction benchmark's sections) has none
RESULT_KINDS = {"trace": "a trace replay", "evaluation": "an evaluation"}


def results_kind(path: Path) -> str | None:
    """The kind of run whose results ``path`` holds (a key of :data:`RESULT_KINDS`); None for no file or one that
    cannot be read (which the merge moves aside)."""
    try:
        old = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return str(old.get("kind") or "evaluation") if isinstance(old, dict) else None


def refuse_other_results(folder: Path | None, kind: str) -> None:
    """A one-line ConfigError when ``folder``'s results.json holds another kind of run's results than ``kind``: a
    run of one kind never writes over the other's rows (``fresh=true`` sets them aside first)."""
    if folder is None:
        return
    have = results_kind(Path(folder) / "results.json")
    if have is not None and have != kind:
        raise ConfigError(
            f"{Path(folder) / 'results.json'} holds the results of {RESULT_KINDS.get(have, repr(have))}, which "
            f"{RESULT_KINDS[kind]} would write over: choose another hydra.run.dir, or rerun with fresh=true to move "
            f"that folder's products aside first"
        )


def earlier_results(
    path: Path,
    base: dict,
    methods: list[str],
    resume: bool = True,
    kind: str = "evaluation",
    settings_key: str = "method_overrides",
) -> EarlierResults:
    """Read ``path`` (results.json) for a run of ``methods`` whose protocol/bank/method settings are ``base`` (see
    :class:`EarlierResults`; ``settings_key``: the field of ``base`` and of the file that holds each method's own
    settings). A file of another protocol or bank is moved aside (a warning names where); a file of another ``kind``
    of run is refused (:func:`refuse_other_results`)."""
    path = Path(path)
    if not path.exists():
        return EarlierResults()
    refuse_other_results(path.parent, kind)
    try:
        old = json.loads(path.read_text())
    except ValueError:
        old = None
    differ = (
        ["unreadable file"]
        if old is None
        else [k for k in base if k != settings_key and old.get(k) != json.loads(json.dumps(base[k], default=str))]
    )
    if differ:
        stamp = time_stamp()
        for p in (path, path.with_suffix(".md")):
            if p.exists():
                os.replace(p, free_path(p.with_name(f"{p.stem}.superseded-{stamp}{p.suffix}")))
        log.warning(
            f"{path} was written with another {', '.join(differ)}: moved aside to "
            f"{path.stem}.superseded-{stamp}.json; evaluating every method anew"
        )
        return EarlierResults()
    was_over = old.get(settings_key) or {}
    was, now = _neutral(was_over), _neutral(json.loads(json.dumps(base[settings_key], default=str)))
    was_dig, now_dig = old.get("checkpoint_digests"), checkpoint_digests(base[settings_key])
    out = EarlierResults()
    for r in old.get("rows", []):
        m = r["method"]
        if m not in methods:
            out.other.append(r)
        elif resume and was.get(m) == now.get(m) and (was_dig is None or was_dig.get(m) == now_dig.get(m)):
            out.done.setdefault(m, []).append(r)  # a method's rows depend on its own settings
    others = {r["method"] for r in out.other}
    out.overrides = {m: o for m, o in was_over.items() if m in others}
    out.digests = {m: d for m, d in (was_dig or {}).items() if m in others}
    for kind in ("skipped", "failed"):
        out.notes[kind] = {m: why for m, why in (old.get(kind) or {}).items() if m not in methods}
    rerun = sorted({r["method"] for r in old.get("rows", []) if r["method"] in methods} - set(out.done))
    if rerun:
        why = "method settings or checkpoints changed" if resume else "eval.resume=false"
        log.warning(f"{', '.join(rerun)} evaluated anew ({why}); their earlier rows replaced")
    if out.done or others:
        log.info(
            f"resume: {path} keeps {', '.join(sorted(set(out.done) | others))}"
            + (f" ({', '.join(sorted(out.done))} not evaluated again)" if out.done else "")
        )
    return out
