"""Job traces in the ITP schemas, read and checked before any work; cluster specs (``n64g8``).

Schemas are registered in one place, ``SCHEMAS`` (``register_schema``): each names the columns it adds to the raw
ones, whether its jobs name their model and iteration count (``per_model``: what target-loss jobs and per-model
throughput tables need) and their deadline (``deadlines``), and the function that reads those columns. A CSV is read
in the schema of most added columns that it holds all of. Two schemas (the ITP traces published with ElasticFlow):
  * ``raw``: ``job_id, submission_time, duration, num_gpu`` (seconds, seconds, GPUs);
  * ``elasticflow``: the raw columns plus ``num_iteration, model_name, deadline, batch_size`` (deadline: absolute
    time on the submission clock).
A raw trace has no iteration count, model or deadline: each job is rigid work of ``duration`` seconds on ``num_gpu``
GPUs, and its deadline is ``submission_time + deadline_factor * duration`` (``trace.deadline_factor``).
Every fault is one ``TraceError`` line naming the file, row and column.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from mara.core.config import ConfigError

RAW_COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")
ELASTIC_COLUMNS = RAW_COLUMNS + ("num_iteration", "model_name", "deadline", "batch_size")
#: column names of ElasticFlow's trace generator, read as the ITP names
ALIASES = {"submit_time": "submission_time", "iteration": "num_iteration", "ddl": "deadline"}
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "data" / "traces"
#: the sample shipped in the package (first 300 jobs of ITP cluster 01, MIT licence beside it)
SHIPPED_SAMPLE = SHIPPED_DIR / "itp_cluster01_first300.csv"


SIZE_CLASSES = ("1", "2-4", "5-15", "16+")  # GPUs a job asks for: 1, 2-4, 8 (5-15), >= 16


def size_class(num_gpu: np.ndarray) -> np.ndarray:
    """``[J]`` index into SIZE_CLASSES."""
    return np.digitize(num_gpu, [2, 5, 16]).astype(np.int64)


class TraceError(ConfigError):
    """A trace that cannot be replayed (missing column, bad value, too many GPUs, empty): one line, exit 2."""


@dataclass(frozen=True)
class Cluster:
    """``nodes`` × ``gpus_per_node`` GPUs, as ElasticFlow's ``n<nodes>g<gpus>`` names them."""

    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def name(self) -> str:
        return f"n{self.nodes}g{self.gpus_per_node}"


def parse_cluster(spec) -> Cluster:
    """``"n64g8"`` → Cluster(64, 8); anything else a one-line ConfigError."""
    m = re.fullmatch(r"n(\d+)g(\d+)", str(spec).strip())
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ConfigError(
            f"trace.cluster must name nodes x GPUs per node as n<nodes>g<gpus> (e.g. n64g8), got {spec!r}"
        )
    return Cluster(int(m.group(1)), int(m.group(2)))


@dataclass(frozen=True)
class Trace:
    """Jobs sorted by submission time (stable), arrays ``[J]``; ``model``/``batch_size`` empty/0 for raw traces."""

    path: str
    schema: str  # "raw" | "elasticflow"
    job_id: np.ndarray  # [J] str
    submit: np.ndarray  # [J] int64 seconds
    duration: np.ndarray  # [J] int64 seconds
    num_gpu: np.ndarray  # [J] int64
    iterations: np.ndarray  # [J] float64 (raw: duration)
    model: np.ndarray  # [J] str ("" for raw)
    deadline: np.ndarray  # [J] int64 absolute
    batch_size: np.ndarray  # [J] int64 (0 for raw)

    @property
    def n_jobs(self) -> int:
        return len(self.submit)

    def take(self, idx) -> Trace:
        """The jobs at ``idx`` (an index array or slice), same schema."""
        return Trace(self.path, self.schema, *(getattr(self, f)[idx] for f in _ARRAYS))


_ARRAYS = ("job_id", "submit", "duration", "num_gpu", "iterations", "model", "deadline", "batch_size")


#: the largest value a trace's integer column may hold (seconds, GPUs, iterations; far beyond any real trace, and
#: safe from overflow in the simulator's int64 arithmetic)
INT_MAX = 2**62


def _int_column(rows, col: str, where: str, first_row: int = 2) -> np.ndarray:
    out = np.empty(len(rows), dtype=np.int64)
    for i, r in enumerate(rows):
        v = (r.get(col) or "").strip()
        try:
            x = float(v)
        except ValueError:
            raise TraceError(f"{where}: row {i + first_row}, column {col}: not a number ({v!r})") from None
        if not np.isfinite(x) or x < 0 or x != int(x):
            raise TraceError(f"{where}: row {i + first_row}, column {col}: must be a non-negative integer, got {v!r}")
        if x > INT_MAX:
            raise TraceError(f"{where}: row {i + first_row}, column {col}: {v[:30]} is beyond 2^62")
        out[i] = int(x)
    return out


def _read_csv(p: Path, where: str) -> tuple[list[str], list[dict]]:
    """(header with the ITP names, rows) of a CSV file: one TraceError line for bytes that are not UTF-8, a field
    longer than the CSV reader takes, or a column named twice."""
    with open(p, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        try:
            header = [ALIASES.get(h.strip(), h.strip()) for h in (reader.fieldnames or [])]
            if len(set(header)) < len(header):
                raise TraceError(f"{where}: a column is named twice (or under both its name and its alias): {header}")
            reader.fieldnames = header
            rows = list(reader)
        except UnicodeDecodeError as exc:
            raise TraceError(
                f"{where}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})"
            ) from None
        except csv.Error as exc:
            raise TraceError(f"{where}: line {reader.line_num + 1}: not a readable CSV row ({exc})") from None
    return header, rows


def load_trace(path, cluster: Cluster | None = None, deadline_factor: float = 1.5, known_models=None) -> Trace:
    """Read and check a trace CSV; ``cluster`` bounds ``num_gpu``; ``known_models``: models with throughput tables."""
    p = Path(path)
    where = str(p)
    if not p.is_file():
        raise TraceError(f"trace.path={where}: no such file")
    header, rows = _read_csv(p, where)
    if not header:
        raise TraceError(f"{where}: empty file (expected a header {','.join(RAW_COLUMNS)} and one row per job)")
    missing = [c for c in RAW_COLUMNS if c not in header]
    if missing:
        raise TraceError(f"{where}: missing column(s) {', '.join(missing)} (a trace needs {', '.join(RAW_COLUMNS)})")
    schema = schema_of(header, where)
    if not rows:
        raise TraceError(f"{where}: no jobs (the file has a header only)")
    if "best_effort" in header:
        be = _int_column(rows, "best_effort", where)
        if be.any():
            raise TraceError(
                f"{where}: row {int(np.argmax(be)) + 2}: best-effort jobs (no deadline) are not replayed; "
                f"drop them or set best_effort=0"
            )
    submit = _int_column(rows, "submission_time", where)
    duration = _int_column(rows, "duration", where)
    num_gpu = _int_column(rows, "num_gpu", where)
    bad = np.flatnonzero(num_gpu < 1)
    if bad.size:
        raise TraceError(f"{where}: row {bad[0] + 2}, column num_gpu: a job needs at least 1 GPU, got 0")
    if cluster is not None and num_gpu.max() > cluster.gpus:
        i = int(np.argmax(num_gpu))
        raise TraceError(
            f"{where}: row {i + 2}: job asks for {num_gpu[i]} GPUs, more than cluster {cluster.name} has "
            f"({cluster.gpus}); pick a larger trace.cluster"
        )
    job_id = np.array([(r.get("job_id") or "").strip() for r in rows], dtype=object)
    base = {"job_id": job_id, "submit": submit, "duration": duration}
    iterations, model, deadline, batch = schema.read(rows, where, base, deadline_factor, known_models)
    order = np.argsort(submit, kind="stable")
    t = Trace(where, schema.name, job_id, submit, duration, num_gpu, iterations, model, deadline, batch)
    return t.take(order)


def _elasticflow_columns(rows, where: str, base: dict, deadline_factor, known_models) -> tuple:
    """(iterations, model, deadline, batch) of the elasticflow schema's columns, checked."""
    submit, job_id = base["submit"], base["job_id"]
    iterations = _int_column(rows, "num_iteration", where).astype(np.float64)
    deadline = _int_column(rows, "deadline", where)
    batch = _int_column(rows, "batch_size", where)
    model = np.array([(r.get("model_name") or "").strip() for r in rows], dtype=object)
    early = np.flatnonzero(deadline < submit)
    if early.size:
        i = int(early[0])
        raise TraceError(
            f"{where}: row {i + 2}, column deadline: job {job_id[i]} is due at {deadline[i]}, before it is "
            f"submitted ({submit[i]})"
        )
    zero = np.flatnonzero(iterations < 1)
    if zero.size:
        raise TraceError(f"{where}: row {zero[0] + 2}, column num_iteration: a job needs at least 1 iteration")
    if known_models is not None:
        for i, (m, b) in enumerate(zip(model, batch)):
            if (m, int(b)) not in known_models:
                raise TraceError(
                    f"{where}: row {i + 2}: no throughput table for model_name={m!r} at batch_size="
                    f"{b} (known: {', '.join(sorted({k[0] for k in known_models}))})"
                )
    return iterations, model, deadline, batch


def _raw_columns(rows, where: str, base: dict, deadline_factor, known_models) -> tuple:
    """(iterations, model, deadline, batch) of a raw trace: ``duration`` seconds of rigid work, due
    ``deadline_factor`` times its duration after its submission."""
    submit, duration = base["submit"], base["duration"]
    bad = np.flatnonzero(duration < 1)
    if bad.size:
        raise TraceError(f"{where}: row {bad[0] + 2}, column duration: a job needs at least 1 second of work")
    due = submit + np.ceil(float(deadline_factor) * duration)
    over = np.flatnonzero(~(due <= INT_MAX))
    if over.size:
        raise TraceError(
            f"{where}: row {over[0] + 2}, column duration: its deadline (trace.deadline_factor={deadline_factor:g} "
            f"x duration) is beyond 2^62"
        )
    n = len(rows)
    deadline = submit + np.ceil(float(deadline_factor) * duration).astype(np.int64)
    return duration.astype(np.float64), np.array([""] * n, dtype=object), deadline, np.zeros(n, dtype=np.int64)


@dataclass(frozen=True)
class Schema:
    """A trace schema (see the module docstring): ``columns`` it adds to ``RAW_COLUMNS``; ``read(rows, where, base,
    deadline_factor, known_models) -> (iterations, model, deadline, batch_size)`` arrays ``[J]``."""

    name: str
    columns: tuple[str, ...]
    per_model: bool
    deadlines: bool
    read: Callable


#: every trace schema, by name
SCHEMAS: dict[str, Schema] = {}


def register_schema(schema: Schema) -> Schema:
    """Make ``schema`` one a trace CSV can be read in."""
    SCHEMAS[schema.name] = schema
    return schema


register_schema(Schema("raw", (), per_model=False, deadlines=False, read=_raw_columns))
register_schema(Schema("elasticflow", ELASTIC_COLUMNS[len(RAW_COLUMNS) :], True, True, _elasticflow_columns))


def schema_of(header: list[str], where: str) -> Schema:
    """The schema a CSV with ``header`` is read in: of the most added columns it holds all of; a schema's columns
    held only in part are one TraceError line."""
    for s in SCHEMAS.values():
        have = [c for c in s.columns if c in header]
        if have and len(have) < len(s.columns):
            lack = [c for c in s.columns if c not in header]
            raise TraceError(
                f"{where}: has {', '.join(have)} but lacks {', '.join(lack)} (the {s.name} schema "
                f"needs all of {', '.join(s.columns)})"
            )
    return max((s for s in SCHEMAS.values() if all(c in header for c in s.columns)), key=lambda s: len(s.columns))


@dataclass(frozen=True)
class Window:
    """Jobs submitted in ``[start, start + length)`` are scored; those in ``[start - warmup, start)`` run first,
    unscored, so the window opens on a busy cluster. ``split``: ``eval`` or ``val``."""

    index: int
    split: str
    start: int
    length: int
    warmup: int


def make_windows(trace: Trace, length, warmup: int, count: int, val_count: int, first_jobs) -> list[Window]:
    """Disjoint windows over the trace's span: ``val_count`` validation windows first, then ``count`` evaluation
    windows, each of ``length`` seconds after ``warmup`` seconds (null length: the whole trace as one window;
    ``first_jobs`` N: one window of the first N jobs by submission time). Validation windows never overlap
    evaluation windows, warm-ups included."""
    t0, t1 = int(trace.submit[0]), int(trace.submit[-1]) + 1
    if first_jobs is not None or length is None:
        end = int(trace.submit[min(int(first_jobs), trace.n_jobs) - 1]) + 1 if first_jobs is not None else t1
        return [Window(0, "eval", t0, end - t0, 0)]
    length, warmup = int(length), int(warmup)
    span = length + warmup
    n = (t1 - t0) // span
    if n < count + val_count:
        raise ConfigError(
            f"trace.windows: {count} evaluation + {val_count} validation windows of {length}+{warmup} s "
            f"do not fit the trace's {t1 - t0} s (at most {n}); shorten trace.window_s or ask fewer"
        )
    out = []
    for k in range(val_count + count):
        split = "val" if k < val_count else "eval"
        out.append(Window(k - val_count if split == "eval" else k, split, t0 + k * span + warmup, length, warmup))
    return out


def window_jobs(trace: Trace, w: Window, first_jobs=None) -> tuple[Trace, np.ndarray]:
    """The jobs a window replays (warm-up included) and which of them are scored ``[J] bool``."""
    if first_jobs is not None:
        n = min(int(first_jobs), trace.n_jobs)
        return trace.take(slice(0, n)), np.ones(n, dtype=bool)
    lo = np.searchsorted(trace.submit, w.start - w.warmup, side="left")
    hi = np.searchsorted(trace.submit, w.start + w.length, side="left")
    sub = trace.take(slice(lo, hi))
    return sub, sub.submit >= w.start
