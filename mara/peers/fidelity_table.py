"""``python -m mara.peers fidelity``: the peer's simulator and ours side by side on the fidelity cases: same file,
same run, same machine.

    python -m mara.peers fidelity                         # every case, EDF and ElasticFlow
    python -m mara.peers fidelity --case fig10 --case cluster01_first300
    python -m mara.peers fidelity --recorded              # the peer's recorded numbers, not a fresh run
    python -m mara.peers fidelity --case cluster03 --method Gandiva --merge --out docs/fidelity/trace_fidelity_whole

Prints case, method, peer ratio, our ratio, difference, jobs on which both agree, peer seconds, our seconds and the
speed-up, and writes the table to docs/fidelity/trace_fidelity.md and .json (with --merge: into the rows already
there, replacing those of the same case and method; every row keeps the date and command of the run that made it).
Ours is ``python -m mara.evaluate experiment=trace trace.path=<csv> trace.cluster=<spec> 'methods=[<method>]'``;
where it is not available yet the table says so and still gives the peer's column. Fresh peer results also refresh
docs/fidelity/trace_peer.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from mara.peers.cases import CASES, CORE_METHODS, case_named, ensure_case_file, sha256
from mara.peers.cli import check_limit, fail
from mara.peers.elasticflow import (
    DEFAULT_PEER_ROOT,
    DEFAULT_SLOT,
    DEFAULT_VENV,
    REPO_ROOT,
    SCHEDULES,
    PeerUnavailable,
    check_peer_root,
    ensure_venv,
    run_peer,
)
from mara.peers.record import (
    DEFAULT_RECORD,
    case_entry,
    load_record,
    machine,
    put_result,
    save_record,
)
from mara.peers.side_by_side import (
    WHOLE_FILE,
    compare_row,
    job_ids,
    markdown_table,
    merge_rows,
    ours_available,
    run_ours,
)

OUT = REPO_ROOT / "docs" / "fidelity" / "trace_fidelity"


def main(argv=None) -> None:
    args = _parser().parse_args(argv)
    check_limit(args.time_limit, "--time-limit")
    methods = args.method or list(CORE_METHODS)
    for m in methods:
        if m not in SCHEDULES:
            fail(f"unknown method {m!r}; the peer runs {', '.join(SCHEDULES)}")
    try:
        cases = [case_named(n) for n in args.case] if args.case else list(CASES)
        check_peer_root(args.peer_root)
        python = ensure_venv(args.venv)
    except (ValueError, PeerUnavailable) as exc:
        fail(str(exc))
    ok, why = ours_available()
    if not ok:
        print(f"ours: {why}; the peer's column only")
    record = load_record(args.record)
    rows = []
    for case in cases:
        path = ensure_case_file(case, python, args.peer_root)
        with open(path) as f:
            n_jobs = sum(1 for _ in f) - 1
        entry = case_entry(record, case, sha256(path), n_jobs)
        ids = job_ids(path)
        for method in methods:
            if method not in case.methods:
                continue
            limit = case.limits.get(method, args.time_limit)
            peer = entry["results"].get(method) if args.recorded else None
            if peer is None:
                res = run_peer(
                    path,
                    case.cluster,
                    method,
                    python=python,
                    peer_root=args.peer_root,
                    slot=DEFAULT_SLOT,
                    time_limit_s=limit,
                    keep_log=None if args.peer_logs is None else args.peer_logs / f"{case.name}_{method}.log",
                )
                peer = put_result(
                    entry,
                    res,
                    f"python -m mara.peers run --case {case.name} --method {method} --time-limit {limit:g}",
                )
                save_record(record, args.record)
            ours = run_ours(
                path,
                case.cluster,
                method,
                args.time_limit,
                WHOLE_FILE if args.ours_override is None else tuple(args.ours_override),
            )
            row = compare_row(case.name, method, peer, ours, ids)
            rows.append(row)
            print(markdown_table([row]).splitlines()[-1], flush=True)
    print("\n" + markdown_table(rows))
    _write_table(args, rows, argv)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m mara.peers fidelity", description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", help="a fidelity case (repeatable; default: all)")
    ap.add_argument("--method", action="append", help="EDF or ElasticFlow (repeatable; default: both)")
    ap.add_argument("--recorded", action="store_true", help="use the peer's recorded results instead of running it")
    ap.add_argument("--time-limit", type=float, default=900.0, help="seconds per run of either side (default 900)")
    ap.add_argument(
        "--ours-override",
        action="append",
        default=None,
        help=f"override for our command, replacing the default {' '.join(WHOLE_FILE)} (repeatable)",
    )
    ap.add_argument("--out", type=Path, default=OUT, help="table path without suffix (.md and .json are written)")
    ap.add_argument(
        "--merge",
        action="store_true",
        help="add this run's rows to the table at --out (same case and method replaced) instead of writing a new one",
    )
    ap.add_argument("--record", type=Path, default=DEFAULT_RECORD, help="the peer's results file")
    ap.add_argument("--peer-logs", type=Path, help="keep each peer run's printed log here, as <case>_<method>.log")
    ap.add_argument("--peer-root", type=Path, default=DEFAULT_PEER_ROOT)
    ap.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    return ap


def _write_table(args, rows: list[dict], argv) -> None:
    """The table at ``args.out`` (.md and .json), each row stamped with this run's date and command; with
    ``--merge`` laid over the rows already there."""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    command = "python -m mara.peers fidelity " + " ".join(sys.argv[1:] if argv is None else argv)
    peer_note = "recorded (docs/fidelity/trace_peer.json)" if args.recorded else "run in this same run"
    for row in rows:
        row.update(date=when, command=command.strip(), peer=peer_note)
    runs = [{"date": when, "machine": machine(), "peer": peer_note, "command": command.strip()}]
    old = args.out.with_suffix(".json")
    if args.merge and old.is_file():
        before = json.loads(old.read_text())
        # a table written before rows carried their run keeps its one run
        first = [{k: before.get(k, "-") for k in ("date", "machine", "peer", "command")}] if "date" in before else []
        runs = before.get("runs", first) + runs
        rows = merge_rows(before.get("rows", []), rows, [c.name for c in CASES])
    made_by = "\n".join(f"- {r['date']}, {r['machine']}; peer {r['peer']}: `{r['command']}`" for r in runs)
    args.out.with_suffix(".md").write_text(
        "Peer (ElasticFlow authors' simulator) and ours on the same trace files, each row from one run of the "
        f"command (its date and command per row in the .json):\n\n{made_by}\n\n" + markdown_table(rows) + "\n"
    )
    args.out.with_suffix(".json").write_text(json.dumps({"runs": runs, "rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out.with_suffix('.md')} and .json")
