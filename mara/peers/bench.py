"""``python -m mara.peers bench``: the peer's simulator seconds per trace and method (wall and
CPU of its process), measured in this run under a time limit (said as such when it is reached), beside our run of
the same file where this checkout has it: the process (start-up included) and the replay alone (timed inside the
process), and the speed-up of the replay (target: at least 20 times faster than the peer).

    python -m mara.peers bench [--case CASE ...] [--method EDF|ElasticFlow ...] [--limit SECONDS] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from mara.peers.cases import CORE_METHODS, case_named, ensure_case_file
from mara.peers.cli import check_limit, fail
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


DEFAULT_LIMIT_S = 300.0  # seconds a peer run may take where neither the user nor the case says


def peer_rows(
    cases=DEFAULT_CASES,
    methods=CORE_METHODS,
    time_limit_s: float | None = None,
    ours: bool = True,
    peer_root=DEFAULT_PEER_ROOT,
    venv=DEFAULT_VENV,
) -> list:
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
            limit = case.limit_s(method, time_limit_s, DEFAULT_LIMIT_S)
            peer = run_peer(path, case.cluster, method, python=python, peer_root=peer_root, time_limit_s=limit)
            row = {
                "case": name,
                "method": method,
                "peer_seconds": peer.seconds,
                "peer_status": peer.status,
                "peer_cpu_seconds": peer.cpu_seconds,
                "limit_s": limit,
                "peer_ratio": peer.ratio,
            }
            if ours:
                mine = run_ours(path, case.cluster, method, limit)
                row.update(
                    our_status=mine.status,
                    our_seconds=mine.seconds,
                    our_ratio=mine.ratio,
                    our_replay_seconds=mine.replay_seconds,
                    our_replay_cpu_seconds=mine.replay_cpu_seconds,
                )
                if mine.seconds and peer.status in ("ok", "timeout"):
                    row["speedup"] = peer.seconds / mine.seconds
                if mine.replay_seconds and peer.status in ("ok", "timeout"):
                    row["replay_speedup"] = peer.seconds / mine.replay_seconds
                if mine.replay_cpu_seconds and peer.cpu_seconds and peer.status in ("ok", "timeout"):
                    row["replay_cpu_speedup"] = peer.cpu_seconds / mine.replay_cpu_seconds
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
        print(
            f"{label:<{width}}{_fmt_s(r['peer_seconds'], r['peer_status'], r['limit_s']):>16}  "
            f"ratio {r['peer_ratio'] if r['peer_ratio'] is not None else '-'}"
        )
        if r.get("peer_cpu_seconds") is not None:
            print(f"{'  peer CPU (s)':<{width}}{r['peer_cpu_seconds']:>16.2f}")
        if "our_status" in r:
            label = f"ours {r['method']} on {r['case']}, process (s)"
            ours = _fmt_s(r["our_seconds"], r["our_status"], 0) if r["our_status"] == "ok" else r["our_status"]
            print(f"{label:<{width}}{ours:>16}  start-up included")
            if r.get("our_replay_seconds") is not None:
                print(f"{'  our replay alone (s)':<{width}}{r['our_replay_seconds']:>16.3f}  timed inside the process")
            if r.get("our_replay_cpu_seconds") is not None:
                print(f"{'  our replay alone, CPU (s)':<{width}}{r['our_replay_cpu_seconds']:>16.3f}")
        bound = ">= " if r.get("peer_status") == "timeout" else ""
        if r.get("replay_speedup"):
            print(
                f"{'  speed-up, peer wall / our replay':<{width}}{bound + format(r['replay_speedup'], '.1f'):>16}  "
                f">= {SPEEDUP_TARGET:.0f}"
            )
        if r.get("replay_cpu_speedup"):
            print(
                f"{'  speed-up, peer CPU / our replay':<{width}}"
                f"{bound + format(r['replay_cpu_speedup'], '.1f'):>16}  >= {SPEEDUP_TARGET:.0f}"
            )
        if r.get("speedup"):
            print(f"{'  speed-up, peer / our process':<{width}}{bound + format(r['speedup'], '.1f'):>16}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m mara.peers bench", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--case",
        action="append",
        default=None,
        help=f"trace case (repeatable; default {', '.join(DEFAULT_CASES)}; cases: python -m mara.peers run --list)",
    )
    ap.add_argument(
        "--limit",
        type=float,
        default=None,
        help=f"seconds per peer run (default: the case's limit for a slow method, else {DEFAULT_LIMIT_S:g})",
    )
    ap.add_argument(
        "--method",
        action="append",
        choices=list(CORE_METHODS),
        help="method timed (repeatable; default: EDF and ElasticFlow)",
    )
    ap.add_argument("--json", default=None, metavar="FILE", help="also write the rows to FILE")
    args = ap.parse_args(argv)
    check_limit(args.limit, "--limit")
    try:
        for name in args.case or ():
            case_named(name)
    except ValueError as exc:
        fail(str(exc))
    print(f"{'benchmark':<44}{'value':>16}  target")
    rows = peer_rows(
        tuple(args.case or DEFAULT_CASES), methods=tuple(args.method or CORE_METHODS), time_limit_s=args.limit
    )
    print_peer_rows(rows)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(
            json.dumps({"peer": rows, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=1)
        )
        print(f"wrote {args.json}")
