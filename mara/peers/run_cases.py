"""``python -m mara.peers run``: the ElasticFlow authors' simulator on the fidelity cases (or on any trace), and
the record of what it gives.

    python -m mara.peers run                      # every case, EDF and ElasticFlow first; resumable
    python -m mara.peers run --case fig10 --method EDF --force
    python -m mara.peers run --trace my.csv --cluster n64g8 --method ElasticFlow --time-limit 600
    python -m mara.peers run --setup              # only make the peer's environment
    python -m mara.peers run --list               # the cases, and what is recorded as a table

Results of the cases go to docs/fidelity/trace_peer.json (ratio, seconds, date, machine, command, the trace rows
that missed); a case/method already recorded for the same file is skipped unless --force. The peer runs under
``nice`` and one at a time, each with a time limit (a case's own, else --time-limit).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mara.peers.cases import CASES, CORE_METHODS, case_named, ensure_case_file, sha256
from mara.peers.cli import check_limit, fail
from mara.peers.elasticflow import (
    DEFAULT_PEER_ROOT,
    DEFAULT_SLOT,
    DEFAULT_VENV,
    SCHEDULES,
    PeerUnavailable,
    check_peer_root,
    cluster_spec_names,
    ensure_venv,
    run_peer,
)
from mara.peers.record import (
    DEFAULT_RECORD,
    case_entry,
    load_record,
    markdown,
    needs_run,
    put_result,
    save_record,
)

DEFAULT_LIMIT_S = 900.0


def _line(case: str, r) -> str:
    ratio = "-" if r.get("ratio") is None else f"{r['ratio']:.3f}"
    limit = f" (limit {r['limit_s']:.0f} s)" if r.get("limit_s") else ""
    return f"{case:<20}{r['method']:<12}{r['status']:<9}{ratio:>7}{r['seconds']:>10.1f} s{limit}"


def run_cases(args, python: Path) -> None:
    record = load_record(args.record)
    cases = [case_named(n) for n in args.case] if args.case else list(CASES)
    # the methods both sides have go first over every case, the peer's others after
    order = [
        (c, m)
        for core in (True, False)
        for c in cases
        for m in (args.method or c.methods)
        if (m in CORE_METHODS) == core
    ]
    for case, method in order:
        path = ensure_case_file(case, python, args.peer_root)
        with open(path) as f:
            n_jobs = sum(1 for _ in f) - 1
        entry = case_entry(record, case, sha256(path), n_jobs)
        limit = case.limit_s(method, args.time_limit, DEFAULT_LIMIT_S)
        if not args.force and not needs_run(entry, method, limit):
            print(_line(case.name, entry["results"][method]) + "   (recorded)")
            continue
        result = run_peer(
            path,
            case.cluster,
            method,
            python=python,
            peer_root=args.peer_root,
            slot=args.slot,
            time_limit_s=limit,
            nice=args.nice,
        )
        command = f"python -m mara.peers run --case {case.name} --method {method}"
        rec = put_result(entry, result, command + (f" --time-limit {limit:g}" if limit else ""))
        save_record(record, args.record)
        print(_line(case.name, rec) + (f"   {result.error}" if result.error else ""), flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m mara.peers run", description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", help="a fidelity case (repeatable; default: all)")
    ap.add_argument("--method", action="append", help=f"one of {', '.join(SCHEDULES)} (repeatable)")
    ap.add_argument("--trace", type=Path, help="run on this trace CSV instead of the cases (printed, not recorded)")
    ap.add_argument("--cluster", default="n64g8", help="cluster spec of --trace (the peer's cluster_specs/<name>.csv)")
    ap.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help=f"seconds per peer run (default: the case's limit for a slow method, else {DEFAULT_LIMIT_S:g})",
    )
    ap.add_argument("--slot", type=int, default=DEFAULT_SLOT, help="scheduling slot in seconds (default 60)")
    ap.add_argument("--nice", type=int, default=10, help="niceness of the peer's process (default 10)")
    ap.add_argument("--force", action="store_true", help="rerun what is already recorded")
    ap.add_argument("--record", type=Path, default=DEFAULT_RECORD, help="results file (default %(default)s)")
    ap.add_argument("--peer-root", type=Path, default=DEFAULT_PEER_ROOT, help="the peer's ElasticFlow folder")
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the peer's virtual environment (made if absent)")
    ap.add_argument("--setup", action="store_true", help="only make the peer's environment")
    ap.add_argument("--list", action="store_true", help="list the cases and what is recorded")
    args = ap.parse_args(argv)
    check_limit(args.time_limit, "--time-limit")
    if args.list:
        for c in CASES:
            print(f"{c.name:<20}{c.describe()}")
        print("\n" + markdown(load_record(args.record)))
        return
    for m in args.method or ():
        if m not in SCHEDULES:
            fail(f"unknown method {m!r}; the peer runs {', '.join(SCHEDULES)}")
    try:
        for n in args.case or ():
            case_named(n)
        check_peer_root(args.peer_root)
        if args.trace is not None:
            if not args.trace.is_file():
                fail(f"trace not found: {args.trace}")
            if args.cluster not in cluster_spec_names(args.peer_root):
                fail(
                    f"the peer has no cluster spec {args.cluster!r}; it has "
                    f"{', '.join(cluster_spec_names(args.peer_root))}"
                )
        python = ensure_venv(args.venv)
    except (ValueError, PeerUnavailable) as exc:
        fail(str(exc))
    if args.setup:
        print(f"peer environment ready: {python}")
        return
    if args.trace is not None:
        for m in args.method or CORE_METHODS:
            r = run_peer(
                args.trace,
                args.cluster,
                m,
                python=python,
                peer_root=args.peer_root,
                slot=args.slot,
                time_limit_s=args.time_limit if args.time_limit is not None else DEFAULT_LIMIT_S,
                nice=args.nice,
            )
            print(_line(args.trace.name, r.as_record()) + (f"   {r.error}" if r.error else ""), flush=True)
        return
    run_cases(args, python)
