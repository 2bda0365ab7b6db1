"""Run the ElasticFlow authors' simulator (``../shared/peers/elasticflow``, Apache-2.0) on a trace and read its result.

The peer's program is only *run*: its scheduler folder is copied to a temporary folder (``../shared`` is read-only)
and started in a virtual environment of its own (``ensure_venv``; cvxpy, grpcio, protobuf<3.21, psutil, numpy, kept
outside the repository). What it reports:

- ``final_result.csv`` in its log folder: ``ddl_satis_ratio``, the share of non-best-effort jobs that met their
  deadline (accepted / (accepted + declined));
- its printed log, from which ``scan_log`` takes each job's outcome by the job's row in the trace (the peer numbers
  jobs by the order it reads them): refused at admission, or finished after its deadline.

``job_outcomes`` turns that into one 0/1 ``deadline_met`` per job, the shape our own trace runs report.
"""

from __future__ import annotations

import csv
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
#: the peer's artifact folder as ``../shared`` lays it out beside the repository
DEFAULT_PEER_ROOT = REPO_ROOT.parent / "shared" / "peers" / "elasticflow" / "ElasticFlow"
#: the peer's own virtual environment, outside the repository so no clone carries it
DEFAULT_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mara" / "peer-venv"
#: what its README asks for; protobuf above 3.20 breaks its generated gRPC stubs
PEER_REQUIREMENTS = ("cvxpy", "grpcio", "protobuf<3.21", "psutil", "numpy")
#: Themis's convex program asks cvxpy for the ECOS solver, which cvxpy no longer bundles; EDF and ElasticFlow run
#: without it, so it is installed when it can be and never required
OPTIONAL_REQUIREMENTS = ("ecos",)
#: our method name -> the peer's ``--schedule``; Tiresias is its ``dlas-gpu`` (discretised two-dimensional LAS)
SCHEDULES = {
    "EDF": "edf",
    "ElasticFlow": "ef-accessctrl",
    "Gandiva": "gandiva",
    "Tiresias": "dlas-gpu",
    "Themis": "themis",
}
#: the peer's scheduling slot in seconds, as in its ITP runs
DEFAULT_SLOT = 60


class PeerUnavailable(RuntimeError):
    """The peer's program or its environment cannot be had here (folder missing, packages not installable)."""


@dataclass
class PeerLog:
    """What the peer printed about jobs: rows refused at admission, rows that finished late, rows completed (in time
    or not), its final counts."""

    refused: set = field(default_factory=set)
    late: set = field(default_factory=set)
    completed: set = field(default_factory=set)
    accepted: int | None = None
    declined: int | None = None


@dataclass
class PeerResult:
    """One run of the peer: status ``ok`` | ``timeout`` | ``failed``; ratio from its final_result.csv; wall and CPU
    seconds of its process."""

    method: str
    schedule: str
    status: str
    seconds: float
    limit_s: float | None
    ratio: float | None = None
    cpu_seconds: float | None = None  # user + system CPU of the peer's process: robust to a busy machine
    accepted: int | None = None
    declined: int | None = None
    deadline_met: list | None = None  # per trace row: 1 / 0, None for best-effort rows
    error: str = ""

    def as_record(self) -> dict:
        """The result as plain JSON values (the per-job list kept compact as the rows that missed)."""
        rec = {k: v for k, v in asdict(self).items() if k != "deadline_met" and v not in (None, "")}
        if self.deadline_met is not None:
            rec["missed_rows"] = [i for i, m in enumerate(self.deadline_met) if m == 0]
            rec["jobs_counted"] = sum(m is not None for m in self.deadline_met)
        return rec


# ------------------------------------------------------------------------------------------------ reading its output
_REFUSED = re.compile(r"job\[(\d+)\]'s DDL request cannot be satisfied")
_LATE = re.compile(r"job\[(\d+)\]'s DDL request is not satisfied")
_JOB_IDX = re.compile(r"'job_idx': (\d+)")
_COUNT = re.compile(r"^(accepted|declined) jobs: (\d+)")
_DONE = re.compile(r"^\*\*\*\* job\[(\d+)\] completed")


def scan_log(lines: Iterable[str]) -> PeerLog:
    """Job outcomes from the peer's printed log (lines of its stdout, in order).

    Refusals and EDF-style late finishes are named by a message; an elastic late finish is printed as the job's
    record right after its ``ends at`` line."""
    log, after_end = PeerLog(), False
    for line in lines:
        if after_end and line.startswith("{"):
            m = _JOB_IDX.search(line)
            if m:
                log.late.add(int(m.group(1)))
        after_end = line.startswith("ends at ")
        if "DDL request" in line:
            m = _REFUSED.search(line) or _LATE.search(line)
            if m:
                (log.refused if m.re is _REFUSED else log.late).add(int(m.group(1)))
            continue
        m = _COUNT.match(line)
        if m:
            setattr(log, m.group(1), int(m.group(2)))
            continue
        m = _DONE.match(line)
        if m:
            log.completed.add(int(m.group(1)))
    return log


def decided_outcomes(log: PeerLog) -> dict:
    """Row -> 1 / 0 for the jobs whose outcome the log already settles: refused or late 0, completed in time 1 (of a
    run cut by its time limit, the jobs it decided before the cut)."""
    out = {i: 1 for i in log.completed}
    out.update({i: 0 for i in log.refused | log.late})
    return out


def read_ratio(final_result: Path) -> float:
    """The last ``ddl_satis_ratio`` the peer appended to its ``final_result.csv``."""
    with open(final_result, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{final_result} holds no result row")
    return float(rows[-1]["ddl_satis_ratio"])


def best_effort_rows(trace: Path) -> list:
    """Per trace row, whether the job is best-effort (no deadline; counted by neither side)."""
    with open(trace, newline="") as f:
        return [str(r.get("best_effort") or "0").strip() == "1" for r in csv.DictReader(f)]


def job_outcomes(best_effort: list, log: PeerLog) -> list:
    """Per trace row: 1 if the job met its deadline, 0 if refused or late, None if best-effort."""
    missed = log.refused | log.late
    return [None if be else int(i not in missed) for i, be in enumerate(best_effort)]


def outcomes_agree(outcomes: list, ratio: float, tol: float = 1e-6) -> bool:
    """Whether the per-job outcomes reproduce the peer's own ratio (a check that the log was read right)."""
    counted = [m for m in outcomes if m is not None]
    return bool(counted) and abs(sum(counted) / len(counted) - ratio) <= tol


# ------------------------------------------------------------------------------------------------ its environment
def check_peer_root(peer_root: Path) -> Path:
    """The peer's artifact folder, checked to hold its simulator and its trace generator."""
    peer_root = Path(peer_root)
    if not (peer_root / "scheduler" / "scheduler.py").is_file():
        raise PeerUnavailable(
            f"no ElasticFlow simulator at {peer_root}/scheduler/scheduler.py "
            "(expected ../shared/peers/elasticflow/ElasticFlow beside the repository)"
        )
    return peer_root


def cluster_spec_names(peer_root: Path) -> list:
    """The cluster specs the peer ships (``n64g8``: 64 nodes × 8 GPUs)."""
    return sorted(p.stem for p in (Path(peer_root) / "scheduler" / "cluster_specs").glob("*.csv"))


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _imports_ok(python: Path, probe: str = "import cvxpy, grpc, google.protobuf, psutil, numpy") -> bool:
    return (
        python.is_file()
        and subprocess.run([str(python), "-c", probe], capture_output=True, check=False).returncode == 0
    )


def _add_optional(python: Path) -> None:
    if not _imports_ok(python, "import " + ", ".join(OPTIONAL_REQUIREMENTS)):
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *OPTIONAL_REQUIREMENTS], capture_output=True, check=False
        )


def ensure_venv(venv: Path = DEFAULT_VENV, install: bool = True) -> Path:
    """The peer environment's python, made (``python -m venv`` + pip install) on first use; reused afterwards."""
    venv = Path(venv)
    python = _venv_python(venv)
    if _imports_ok(python):
        if install:
            _add_optional(python)
        return python
    if not install:
        raise PeerUnavailable(f"no peer environment at {venv} (make it with python -m mara.peers run --setup)")
    venv.parent.mkdir(parents=True, exist_ok=True)
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        raise PeerUnavailable(f"cannot make a virtual environment at {venv}: {made.stderr.strip()[-200:]}")
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *PEER_REQUIREMENTS], capture_output=True, text=True, check=False
    )
    if pip.returncode != 0 or not _imports_ok(python):
        tail = (pip.stderr or pip.stdout).strip().splitlines()[-1:] or ["imports fail after install"]
        raise PeerUnavailable(f"cannot install the peer's packages ({' '.join(PEER_REQUIREMENTS)}): {tail[0][:200]}")
    _add_optional(python)
    return python


def peer_copy(peer_root: Path, into: Path) -> Path:
    """A writable copy of the peer's scheduler and trace generator under ``into``; returns the scheduler folder."""
    for part in ("scheduler", "trace_generator"):
        src = Path(peer_root) / part
        if src.is_dir():
            shutil.copytree(src, into / part, ignore=shutil.ignore_patterns("__pycache__"))
    return into / "scheduler"


# ------------------------------------------------------------------------------------------------ running it
def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's finished children so far (differences time one child)."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _lower_priority(pid: int, nice: int) -> None:
    """Run the peer below interactive work (the reference machine is shared)."""
    if nice and hasattr(os, "setpriority"):
        try:
            os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, pid) + nice)
        except OSError:  # the process may already have ended
            pass


def _tee(lines: Iterable[str], out) -> Iterator[str]:
    """``lines``, each also written to ``out``."""
    for line in lines:
        out.write(line)
        yield line


def _peer_command(python: Path, cluster: str, schedule: str, trace: Path, logdir: Path, slot: int) -> list[str]:
    """The peer simulator's command line (run in its scheduler folder) for one trace, cluster and schedule."""
    return [
        str(python),
        "scheduler.py",
        f"--cluster_spec=cluster_specs/{cluster}.csv",
        "--print",
        f"--scheme={'gandiva' if schedule == 'gandiva' else 'elastic'}",
        f"--trace_file={trace}",
        f"--schedule={schedule}",
        f"--log_path={logdir}",
        "--simulation=True",
        f"--scheduling_slot={slot}",
        "--gpu_type=A100",
    ]


def _run_logged(cmd: list[str], cwd: Path, err_path: Path, nice: int, time_limit_s, keep_log: Path | None):
    """Run ``cmd`` in ``cwd`` at lower priority, its stderr into ``err_path``, reading its printed log as it goes
    (also into ``keep_log``), killed past ``time_limit_s``. -> (log, exit status, wall s, CPU s, killed)."""
    with open(err_path, "w") as err:
        t0, c0 = time.perf_counter(), children_cpu_seconds()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=err, text=True, errors="replace")
        _lower_priority(proc.pid, nice)
        killed = threading.Event()

        def _kill():
            killed.set()
            proc.kill()

        timer = threading.Timer(time_limit_s, _kill) if time_limit_s else None
        if timer:
            timer.start()
        try:
            if keep_log is None:
                log = scan_log(proc.stdout)
            else:
                Path(keep_log).parent.mkdir(parents=True, exist_ok=True)
                with open(keep_log, "w") as kept:
                    log = scan_log(_tee(proc.stdout, kept))
            rc = proc.wait()
        finally:
            if timer:
                timer.cancel()
        seconds, cpu = time.perf_counter() - t0, children_cpu_seconds() - c0
    return log, rc, seconds, cpu, killed.is_set()


def run_peer(
    trace: Path,
    cluster: str,
    method: str,
    *,
    python: Path,
    peer_root: Path = DEFAULT_PEER_ROOT,
    slot: int = DEFAULT_SLOT,
    time_limit_s: float | None = None,
    nice: int = 10,
    keep_log: Path | None = None,
) -> PeerResult:
    """Run the peer's simulator once on ``trace`` with ``cluster`` (e.g. ``n64g8``) and ``method`` (our name).

    The wall and CPU times count the peer's process alone (start-up included, the copy of its folder not). Past
    ``time_limit_s`` the process is killed and the result says ``timeout``. With ``keep_log`` its printed log is
    also written there (the evidence where its decisions and ours part)."""
    schedule = SCHEDULES[method]
    trace = Path(trace).resolve()
    peer_root = check_peer_root(peer_root)
    with tempfile.TemporaryDirectory(prefix="mara-peer-") as tmp:
        sched = peer_copy(peer_root, Path(tmp))
        spec = sched / "cluster_specs" / f"{cluster}.csv"
        if not spec.is_file():
            raise ValueError(
                f"the peer has no cluster spec {cluster!r}; it has {', '.join(cluster_spec_names(peer_root))}"
            )
        logdir = Path(tmp) / "log"
        logdir.mkdir()
        cmd = _peer_command(python, cluster, schedule, trace, logdir, slot)
        err_path = Path(tmp) / "stderr.txt"
        log, rc, seconds, cpu, killed = _run_logged(cmd, sched, err_path, nice, time_limit_s, keep_log)
        result = PeerResult(
            method,
            schedule,
            "ok",
            round(seconds, 2),
            time_limit_s,
            cpu_seconds=round(cpu, 2),
            accepted=log.accepted,
            declined=log.declined,
        )
        if killed:
            result.status = "timeout"
            return result
        final = logdir / "final_result.csv"
        if rc != 0 or not final.is_file():
            result.status = "failed"
            tail = err_path.read_text(errors="replace").strip().splitlines()[-1:] or [f"exit status {rc}"]
            result.error = tail[0][:300]
            return result
        result.ratio = read_ratio(final)
        outcomes = job_outcomes(best_effort_rows(trace), log)
        if outcomes_agree(outcomes, result.ratio):
            result.deadline_met = outcomes
        else:
            result.error = "per-job outcomes not read: its log does not name every job that missed"
        return result
