"""The peer's measured results, kept in one JSON file (``docs/fidelity/trace_peer.json``) that runs refresh.

Per case: its trace file (repository-relative path, SHA-256, job count, cluster spec) and per method the peer's
``ddl_satis_ratio``, wall seconds, status (``ok`` | ``timeout`` | ``failed``, with the limit it ran under), the trace
rows that missed their deadline, the date, the machine and the command that made it. A result is reused only for the
same file (same SHA-256); a timeout is retried only under a longer limit.
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from pathlib import Path

from mara.peers.cases import Case, sha256
from mara.peers.elasticflow import REPO_ROOT, PeerResult

DEFAULT_RECORD = REPO_ROOT / "docs" / "fidelity" / "trace_peer.json"


def machine() -> str:
    """This machine in words: CPU model and core count (timings are only comparable on the same one)."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"


def rel(path: Path) -> str:
    """``path`` relative to the repository when inside it (records carry no machine's absolute paths)."""
    try:
        return Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return Path(path).name


def load_record(path: Path = DEFAULT_RECORD) -> dict:
    """The record file's content, or an empty record."""
    path = Path(path)
    if path.is_file():
        return json.loads(path.read_text())
    return {
        "about": "the ElasticFlow authors' simulator (../shared/peers/elasticflow) on the fidelity cases",
        "cases": {},
    }


def save_record(record: dict, path: Path = DEFAULT_RECORD) -> None:
    """Write the record atomically (a killed run never leaves half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(record_text(record))
    os.replace(tmp, path)


def record_text(record: dict) -> str:
    """The record as JSON, indented, with every list of plain numbers (a run's rows) kept on one line: whole-trace
    runs list thousands of rows, one line each would make the file tens of thousands of lines long."""
    text = json.dumps(record, indent=1)
    return re.sub(r"\[\s*((?:-?\d+(?:\.\d+)?,\s*)*-?\d+(?:\.\d+)?)\s*\]", _one_line, text) + "\n"


def _one_line(m: re.Match) -> str:
    return "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]"


def case_entry(record: dict, case: Case, file_sha: str, n_jobs: int) -> dict:
    """The record's entry for ``case``, (re)started when its file changed."""
    entry = record["cases"].get(case.name)
    if entry is None or entry.get("sha256") != file_sha:
        entry = {
            "what": case.describe(),
            "cluster": case.cluster,
            "file": rel(case.path),
            "sha256": file_sha,
            "n_jobs": n_jobs,
            "results": {},
        }
        record["cases"][case.name] = entry
    return entry


def needs_run(entry: dict, method: str, limit_s: float | None) -> bool:
    """Whether ``method`` on this case still has to run: no result, a failure, or a timeout under a shorter limit."""
    prev = entry["results"].get(method)
    if prev is None or prev["status"] == "failed":
        return True
    if prev["status"] == "timeout":
        return limit_s is None or limit_s > (prev.get("limit_s") or 0)
    return False


def put_result(entry: dict, result: PeerResult, command: str) -> dict:
    """Store one run's result in the case entry, with when, where and how it was made."""
    rec = result.as_record()
    rec.update(date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), machine=machine(), command=command)
    entry["results"][result.method] = rec
    return rec


def file_matches(entry: dict, path: Path) -> bool:
    """Whether the recorded results belong to this very file."""
    return Path(path).is_file() and entry.get("sha256") == sha256(path)


def markdown(record: dict) -> str:
    """The recorded results as a markdown table (case, trace and cluster, method, ratio, wall and CPU seconds)."""
    lines = ["| case | trace and cluster | method | peer ratio | wall s | CPU s |", "|---|---|---|---|---|---|"]
    for name, entry in record["cases"].items():
        for method, r in entry["results"].items():
            ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.3f}"
            wall = f"{r['seconds']:.1f}"
            if r["status"] == "timeout":
                ratio, wall = "did not finish", f"> {r['limit_s']:.0f} (limit)"
            elif r["status"] != "ok":
                ratio = r["status"]
            cpu = "-" if r.get("cpu_seconds") is None else f"{r['cpu_seconds']:.1f}"
            lines.append(f"| {name} | {entry['what']} | {method} | {ratio} | {wall} | {cpu} |")
    return "\n".join(lines)
