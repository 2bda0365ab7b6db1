"""The fidelity cases: trace files made once and given identically to the peer's simulator and to ours.

A case is a trace CSV plus the cluster spec it runs on (as the peer's own runs pair them: ``run_fig8b.sh`` puts
ITP clusters 01, 02, 03, 05 on n64g8 and 04, 07, 08, 09 on n128g8; its Figure 10 trace runs on n16g8). The files
live in the git-ignored ``data_cache/trace_cases/``; each is made from ``../shared`` on first use and its SHA-256
is recorded beside the peer's results, so a result is never reused for a different file.
"""

from __future__ import annotations

import csv
import hashlib
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mara.peers.elasticflow import REPO_ROOT, check_peer_root, peer_copy

CASE_DIR = REPO_ROOT / "data_cache" / "trace_cases"
ITP_ARCHIVE = REPO_ROOT.parent / "shared" / "data" / "itp-traces.tar.gz"
ITP_DIR = REPO_ROOT / "data_cache" / "itp-traces"
#: the peer's cluster spec for each ITP cluster (its run_fig8b.sh)
ITP_CLUSTER_SPEC = {
    "01": "n64g8",
    "02": "n64g8",
    "03": "n64g8",
    "05": "n64g8",
    "04": "n128g8",
    "07": "n128g8",
    "08": "n128g8",
    "09": "n128g8",
}
#: the paper's Figure 10 trace, from the peer's generator
FIG10_ARGS = ("--num_jobs=100", "--lam=1500", "--min_ddl=1.5", "--seed=1")
#: the methods both sides implement; the peer's others run where it finishes them
CORE_METHODS = ("EDF", "ElasticFlow")
OTHER_METHODS = ("Gandiva", "Tiresias", "Themis")
#: on whole clusters: the core methods and the time-sharing peers that run there in minutes (not Themis)
WHOLE_METHODS = CORE_METHODS + ("Gandiva", "Tiresias")
#: seconds per peer run on a whole cluster of 3,000-6,000 jobs: its ElasticFlow is the slow one (the others run
#: under the command's limit)
WHOLE_LIMITS = {"ElasticFlow": 900}


@dataclass(frozen=True)
class Case:
    """One trace file and cluster: ``itp`` (a cluster's first ``first`` jobs by submission time, all if None) or
    ``generated`` (the peer's generator with ``args``)."""

    name: str
    cluster: str
    source: str
    itp: str = ""
    first: int | None = None
    args: tuple = ()
    methods: tuple = CORE_METHODS
    limits: dict = field(default_factory=dict)  # method -> seconds, where the peer is known to be slow

    @property
    def path(self) -> Path:
        return CASE_DIR / f"{self.name}.csv"

    def limit_s(self, method: str, given: float | None, default: float) -> float:
        """Seconds the peer may run ``method``: a limit the user gave wins over the case's, then the default."""
        if given is not None:
            return given
        return self.limits.get(method, default)

    def describe(self) -> str:
        if self.source == "generated":
            return f"peer generator {' '.join(self.args)}, {self.cluster}"
        what = f"first {self.first} jobs by submission time" if self.first else "whole trace"
        return f"ITP cluster{self.itp}, {what}, {self.cluster}"


def _itp(num: str, first: int | None, methods=CORE_METHODS, limits=None) -> Case:
    name = f"cluster{num}" + (f"_first{first}" if first else "")
    return Case(name, ITP_CLUSTER_SPEC[num], "itp", itp=num, first=first, methods=methods, limits=limits or {})


#: the cases, in the order they run (the quick ones first)
CASES = (
    Case("fig10", "n16g8", "generated", args=FIG10_ARGS, methods=CORE_METHODS + OTHER_METHODS),
    _itp("01", 300, CORE_METHODS + OTHER_METHODS),
    # Themis's convex program per lease makes the peer slow (minutes): under a limit
    _itp("02", 300, CORE_METHODS + OTHER_METHODS, limits={"Themis": 900}),
    _itp("03", 300, CORE_METHODS + OTHER_METHODS, limits={"Themis": 900}),
    _itp("05", 300, CORE_METHODS + OTHER_METHODS, limits={"Themis": 900}),
    # whole clusters: the peer's ElasticFlow did not finish the whole of cluster01 in 30 minutes, so it runs under a
    # limit (said as such when reached); its Themis (a convex program per lease) is out of reach on whole traces
    _itp("01", None, WHOLE_METHODS, limits={"ElasticFlow": 600}),
    _itp("03", None, WHOLE_METHODS, limits=WHOLE_LIMITS),
    _itp("05", None, WHOLE_METHODS, limits=WHOLE_LIMITS),
    _itp("02", None, WHOLE_METHODS, limits=WHOLE_LIMITS),
    # the largest trace (15,802 jobs, 1,024 GPUs): the speed comparison. The peer's EDF did not finish it in 15 minutes:
    # each method runs under a limit long enough that the peer's CPU seconds at the cut can bound the speed-up
    _itp("04", None, CORE_METHODS, limits={"EDF": 1200, "ElasticFlow": 1200}),
)


def case_named(name: str) -> Case:
    """The case called ``name``; a ValueError naming the choices otherwise."""
    for c in CASES:
        if c.name == name:
            return c
    raise ValueError(f"unknown case {name!r}; cases: {', '.join(c.name for c in CASES)}")


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def itp_trace(num: str, archive: Path = ITP_ARCHIVE, into: Path = ITP_DIR) -> Path:
    """The ElasticFlow-schema CSV of ITP cluster ``num``, unpacked from ``../shared`` on first use."""
    path = into / "elasticflow" / f"cluster{num}.csv"
    if not path.is_file():
        if not Path(archive).is_file():
            raise FileNotFoundError(f"ITP traces not found: {archive}")
        into.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive) as tar:
            tar.extractall(into.parent, filter="data")
    return path


def first_by_submission(src: Path, dst: Path, n: int | None) -> int:
    """Write the first ``n`` rows of ``src`` by submission time (stable; all rows if n is None) to ``dst``."""
    with open(src, newline="") as f:
        reader = csv.DictReader(f)
        header, rows = reader.fieldnames, list(reader)
    key = "submission_time" if "submission_time" in header else "submit_time"
    rows = sorted(rows, key=lambda r: int(r[key]))[:n]
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(dst, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    return len(rows)


def generate_with_peer(args: tuple, dst: Path, python: Path, peer_root: Path) -> None:
    """Run the peer's trace generator (in its own environment) with ``args`` into ``dst``."""
    peer_root = check_peer_root(peer_root)
    dst.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mara-peer-gen-") as tmp:
        peer_copy(peer_root, Path(tmp))
        gen = Path(tmp) / "trace_generator"
        out = subprocess.run(
            [str(python), "generate_trace.py", *args, f"--output_file={dst.resolve()}"],
            cwd=gen,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0 or not dst.is_file():
            raise RuntimeError(f"the peer's trace generator failed: {out.stderr.strip()[-300:]}")


def ensure_case_file(case: Case, python: Path | None = None, peer_root: Path | None = None) -> Path:
    """The case's trace file, made on first use (a generated case needs the peer's environment)."""
    if case.path.is_file():
        return case.path
    if case.source == "generated":
        if python is None or peer_root is None:
            raise ValueError(f"case {case.name} is made by the peer's generator: its environment is needed")
        generate_with_peer(case.args, case.path, python, peer_root)
    else:
        first_by_submission(itp_trace(case.itp), case.path, case.first)
    return case.path
