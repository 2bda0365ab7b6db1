"""The peer's simulator and ours on the same trace file: deadline-met ratios, per-job agreement, wall seconds.

Ours runs as a user runs it, one process per method::

    python -m mara.evaluate experiment=trace trace.path=<csv> trace.cluster=<spec> 'methods=[<method>]'

and is read from that run's ``results.json`` (rows per method × window × job with a 0/1 ``deadline_met``). Our
ratio is the mean of ``deadline_met`` over the rows of the method; jobs are matched to the peer's by ``job_id``.

Speed: the process's wall seconds include its start-up (Python, Hydra, the package: tens of seconds on a loaded
machine), which says nothing of the simulator, so the replay's own seconds, timed inside the process around the
replay (``timings`` in results.json), are read too; the speed-up compares the peer's wall and CPU seconds (its whole
process, start-up included: it has little) with them.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from mara.peers.elasticflow import REPO_ROOT, children_cpu_seconds

#: our trace experiment's config; without it ours is "not available" and only the peer's column is printed
OUR_EXPERIMENT = REPO_ROOT / "conf" / "experiment" / "trace.yaml"
#: the whole file as one window, every job scored, as the peer replays it (no window length, no warm-up)
WHOLE_FILE = ("trace.window_s=null",)


@dataclass
class OurRun:
    """Our simulator on one trace and method: ratio over its job rows, per-job outcomes by job_id, wall seconds."""

    method: str
    status: str  # ok | unavailable | failed
    seconds: float | None = None
    cpu_seconds: float | None = None
    replay_seconds: float | None = None  # the replay itself, timed inside the process (results.json ``timings``)
    replay_cpu_seconds: float | None = None  # its CPU seconds (``timings_cpu``)
    ratio: float | None = None
    n_rows: int = 0
    n_windows: int = 0
    met_by_job: dict = field(default_factory=dict)
    error: str = ""


def ours_available() -> tuple:
    """(True, "") when our trace experiment exists in this checkout, else (False, why)."""
    if not OUR_EXPERIMENT.is_file():
        return False, "our trace replay is not in this checkout yet (no conf/experiment/trace.yaml)"
    return True, ""


def ours_command(trace: Path, cluster: str, method: str, run_dir: Path, extra: tuple = WHOLE_FILE) -> list:
    """The command line of our trace replay for one method over the whole file, its outputs in ``run_dir``."""
    return [
        sys.executable,
        "-m",
        "mara.evaluate",
        "experiment=trace",
        f"trace.path={Path(trace).resolve()}",
        f"trace.cluster={cluster}",
        f"methods=[{method}]",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]


def _rows(data) -> list:
    """The job rows of a results.json: a list of rows, or a dict holding them under ``rows`` or ``jobs``."""
    if isinstance(data, list):
        return data
    for key in ("rows", "jobs", "job_rows"):
        if isinstance(data.get(key), list):
            return data[key]
    raise ValueError("results.json holds no job rows (expected a list, or one under 'rows' or 'jobs')")


def read_ours(results_json: Path, method: str) -> OurRun:
    """Our ratio and per-job outcomes for ``method`` from a trace run's results.json."""
    data = json.loads(Path(results_json).read_text())
    rows = [r for r in _rows(data) if r.get("method") == method and r.get("deadline_met") is not None]
    run = OurRun(method, "ok")
    timing = data.get("timings", {}).get(method) if isinstance(data, dict) else None
    run.replay_seconds = None if timing is None else float(timing)
    cpu = data.get("timings_cpu", {}).get(method) if isinstance(data, dict) else None
    run.replay_cpu_seconds = None if cpu is None else float(cpu)
    if not rows:
        run.status, run.error = "failed", f"no job rows of {method} in {Path(results_json).name}"
        return run
    run.n_rows = len(rows)
    run.n_windows = len({r.get("window", 0) for r in rows})
    run.ratio = sum(int(r["deadline_met"]) for r in rows) / len(rows)
    if run.n_windows == 1:
        run.met_by_job = {str(r["job_id"]): int(r["deadline_met"]) for r in rows if "job_id" in r}
    return run


def run_ours(
    trace: Path, cluster: str, method: str, time_limit_s: float | None = None, extra: tuple = WHOLE_FILE
) -> OurRun:
    """Run our trace replay for one method on ``trace`` (a fresh process; its wall seconds include start-up)."""
    ok, why = ours_available()
    if not ok:
        return OurRun(method, "unavailable", error=why)
    with tempfile.TemporaryDirectory(prefix="mara-ours-") as tmp:
        cmd = ours_command(trace, cluster, method, Path(tmp) / "run", extra)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
        t0, c0 = time.perf_counter(), children_cpu_seconds()
        try:
            out = subprocess.run(
                cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=time_limit_s, env=env, check=False
            )
        except subprocess.TimeoutExpired:
            return OurRun(method, "timeout", seconds=time.perf_counter() - t0, error=f"over {time_limit_s:g} s")
        seconds, cpu = time.perf_counter() - t0, children_cpu_seconds() - c0
        found = sorted(Path(tmp).rglob("results.json"))
        if out.returncode != 0 or not found:
            tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or [f"exit status {out.returncode}"]
            return OurRun(method, "failed", seconds=seconds, error=tail[0][:300])
        run = read_ours(found[0], method)
        run.seconds, run.cpu_seconds = seconds, cpu
        return run


def job_ids(trace: Path) -> list:
    """The trace's ``job_id`` column, by row (the peer names jobs by row)."""
    with open(trace, newline="") as f:
        return [str(r["job_id"]) for r in csv.DictReader(f)]


def per_job_agreement(peer_missed_rows: list, jobs_counted: int, ids: list, ours: dict) -> tuple | None:
    """(jobs where both say the same, jobs compared) over jobs both sides report, or None when either lacks them."""
    if not ours or jobs_counted is None:
        return None
    missed = {ids[i] for i in peer_missed_rows}
    common = [j for j in ids if j in ours]
    if not common:
        return None
    return sum(int(j not in missed) == ours[j] for j in common), len(common)


def compare_row(case: str, method: str, peer: dict, ours: OurRun, ids: list) -> dict:
    """One line of the side-by-side table (peer: a recorded result; ours: our run)."""
    row = {
        "case": case,
        "method": method,
        "peer_status": peer.get("status"),
        "peer_ratio": peer.get("ratio"),
        "peer_seconds": peer.get("seconds"),
        "peer_cpu_seconds": peer.get("cpu_seconds"),
        "peer_limit_s": peer.get("limit_s"),
        "ours_status": ours.status,
        "our_ratio": ours.ratio,
        "our_seconds": ours.seconds,
        "our_cpu_seconds": ours.cpu_seconds,
        "our_replay_seconds": ours.replay_seconds,
        "our_replay_cpu_seconds": ours.replay_cpu_seconds,
        "our_windows": ours.n_windows,
    }
    if peer.get("ratio") is not None and ours.ratio is not None:
        row["difference"] = ours.ratio - peer["ratio"]
    if peer.get("seconds") and ours.seconds:
        # a peer run cut by its limit gives a lower bound on the speed-up
        row["speedup"] = peer["seconds"] / ours.seconds
        row["speedup_is_lower_bound"] = peer.get("status") == "timeout"
    if peer.get("cpu_seconds") and ours.cpu_seconds:
        row["cpu_speedup"] = peer["cpu_seconds"] / ours.cpu_seconds
    if peer.get("seconds") and ours.replay_seconds:
        # the peer's process against our replay alone (timed in our process): wall against wall, CPU against CPU
        row["replay_speedup"] = peer["seconds"] / ours.replay_seconds
        row["speedup_is_lower_bound"] = peer.get("status") == "timeout"
        if peer.get("cpu_seconds") and ours.replay_cpu_seconds:
            row["replay_cpu_speedup"] = peer["cpu_seconds"] / ours.replay_cpu_seconds
    agree = per_job_agreement(peer.get("missed_rows", []), peer.get("jobs_counted"), ids, ours.met_by_job)
    if agree:
        row["jobs_agree"], row["jobs_compared"] = agree
    if ours.error:
        row["ours_note"] = ours.error
    return row


def _f(v, fmt: str, none: str = "-") -> str:
    return none if v is None else format(v, fmt)


def markdown_table(rows: list) -> str:
    """The side-by-side table as markdown: the peer's wall and CPU seconds (its process), ours as a process (start-up
    included) and our replay alone (timed inside the process); the speed-ups are the peer's wall over our replay's wall
    seconds and the peer's CPU over our replay's CPU seconds (a lower bound where the peer reached its time limit)."""
    head = (
        "| case | method | peer ratio | our ratio | difference | jobs agreeing | peer s | peer CPU s "
        "| our process s | our replay s | speed-up | CPU speed-up |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for r in rows:
        peer = _f(r["peer_ratio"], ".3f", r.get("peer_status") or "-")
        peer_s = _f(r["peer_seconds"], ".1f")
        bound = "> " if r.get("peer_status") == "timeout" else ""
        if bound:
            peer_s = f"> {r['peer_seconds']:.0f} (limit)"
        agree = f"{r['jobs_agree']}/{r['jobs_compared']}" if "jobs_compared" in r else "-"
        speed = _f(r.get("replay_speedup"), ".1f")
        cpu = _f(r.get("replay_cpu_speedup"), ".1f")
        speed, cpu = (bound + speed if speed != "-" else speed), (bound + cpu if cpu != "-" else cpu)
        ours = _f(r["our_ratio"], ".3f", r["ours_status"])
        lines.append(
            f"| {r['case']} | {r['method']} | {peer} | {ours} | {_f(r.get('difference'), '+.3f')} | "
            f"{agree} | {peer_s} | {_f(r.get('peer_cpu_seconds'), '.1f')} | {_f(r['our_seconds'], '.1f')} | "
            f"{_f(r.get('our_replay_seconds'), '.2f')} | {speed} | {cpu} |"
        )
    return "\n".join(lines)


def merge_rows(old: list, new: list, order: list) -> list:
    """``old`` rows with those of the same (case, method) as a ``new`` row replaced by it, sorted by case as in
    ``order`` (case names) and then by method name: tables grown over several runs, each row from one run."""
    fresh = {(r["case"], r["method"]) for r in new}
    rows = [r for r in old if (r["case"], r["method"]) not in fresh] + list(new)
    rank = {name: i for i, name in enumerate(order)}
    return sorted(rows, key=lambda r: (rank.get(r["case"], len(rank)), r["method"]))
