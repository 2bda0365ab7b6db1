"""Benchmark rows for ``python -m mara.bench --peer``: the peer's simulator seconds per trace and method, measured
in this run under a time limit (said as such when it is reached), beside our replay of the same file where this
checkout has it, and the speed-up (target: ours at least 20 times faster)."""
from __future__ import annotations

from mara.peers.cases import CORE_METHODS, case_named, ensure_case_file
from mara.peers.elasticflow import (
    DEFAULT_PEER_ROOT,
    DEFAULT_VENV,
    PeerUnavailable,
    ensure_venv,
    run_peer,
)
from mara.peers.side_by_side import run_ours

#: the default: a trace the peer finishes for both methods in minutes on two cores
DEFAULT_CASES = ("cluster01_first300",)
SPEEDUP_TARGET = 20.0


def peer_rows(cases=DEFAULT_CASES, methods=CORE_METHODS, time_limit_s: float = 300.0, ours: bool = True,
              peer_root=DEFAULT_PEER_ROOT, venv=DEFAULT_VENV) -> list:
    """One row per case × method: peer seconds (and status), our seconds, speed-up; a row with ``error`` when the
    peer's environment cannot be had."""
    try:
        python = ensure_venv(venv)
    except PeerUnavailable as exc:
        return [{"error": str(exc)}]
    rows = []
    for name in cases:
        case = case_named(name)
        path = ensure_case_file(case, python, peer_root)
        for method in methods:
            limit = min(time_limit_s, case.limits.get(method, time_limit_s))
            peer = run_peer(path, case.cluster, method, python=python, peer_root=peer_root, time_limit_s=limit)
            row = {"case": name, "method": method, "peer_seconds": peer.seconds, "peer_status": peer.status,
                   "limit_s": limit, "peer_ratio": peer.ratio}
            if ours:
                mine = run_ours(path, case.cluster, method, time_limit_s)
                row.update(our_status=mine.status, our_seconds=mine.seconds, our_ratio=mine.ratio)
                if mine.seconds and peer.status in ("ok", "timeout"):
                    row["speedup"] = peer.seconds / mine.seconds
            rows.append(row)
    return rows


def _fmt_s(seconds: float | None, status: str, limit: float) -> str:
    if status == "timeout":
        return f"> {limit:.0f} (limit)"
    return "-" if seconds is None or status != "ok" else f"{seconds:.2f}"


def print_peer_rows(rows: list, width: int = 44) -> None:
    """Print the rows in mara.bench's layout (label, value, target)."""
    for r in rows:
        if "error" in r:
            print(f"{'peer simulator':<{width}}{'unavailable':>16}  {r['error']}")
            continue
        label = f"peer {r['method']} on {r['case']} (s)"
        print(f"{label:<{width}}{_fmt_s(r['peer_seconds'], r['peer_status'], r['limit_s']):>16}  "
              f"ratio {r['peer_ratio'] if r['peer_ratio'] is not None else '-'}")
        if "our_status" in r:
            label = f"ours {r['method']} on {r['case']} (s)"
            ours = _fmt_s(r["our_seconds"], r["our_status"], 0) if r["our_status"] == "ok" else r["our_status"]
            print(f"{label:<{width}}{ours:>16}")
        if r.get("speedup"):
            bound = ">= " if r["peer_status"] == "timeout" else ""
            print(f"{'  speed-up, peer / ours (same run)':<{width}}{bound + format(r['speedup'], '.1f'):>16}  "
                  f">= {SPEEDUP_TARGET:.0f}")
