"""``python -m mara.peers partial``: ours beside a peer run cut by its time limit, agreement on the jobs the peer had
decided before the cut.

    python -m mara.peers partial --log data_cache/peer_logs/cluster03_ElasticFlow.log \\
        --trace data_cache/trace_cases/cluster03.csv --ours <run dir>/results.json --method ElasticFlow

The peer's kept log (``python -m mara.peers fidelity --peer-logs``) names the jobs it refused at admission, those it
completed, and those that completed late; ours is a ``results.json`` of ``python -m mara.evaluate experiment=trace``
on the same file. Prints the jobs decided by the peer, how many of them ours decides alike, the last arrival row the
peer reached, and the rows where the two part (the first ones).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mara.peers.cli import fail
from mara.peers.elasticflow import decided_outcomes, scan_log
from mara.peers.side_by_side import job_ids, read_ours


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m mara.peers partial", description=__doc__.splitlines()[0])
    ap.add_argument("--log", type=Path, required=True, help="the peer's printed log")
    ap.add_argument("--trace", type=Path, required=True, help="the trace file both ran")
    ap.add_argument("--ours", type=Path, required=True, help="our results.json on the same file")
    ap.add_argument("--method", default="ElasticFlow")
    args = ap.parse_args(argv)
    for path in (args.log, args.trace, args.ours):
        if not path.is_file():
            fail(f"not found: {path}")
    with open(args.log, errors="replace") as f:
        peer = decided_outcomes(scan_log(f))
    ids = job_ids(args.trace)
    ours = read_ours(args.ours, args.method).met_by_job
    common = sorted(i for i in peer if ids[i] in ours)
    apart = [i for i in common if peer[i] != ours[ids[i]]]
    print(f"jobs in the trace: {len(ids)}; decided by the peer before its cut: {len(peer)} (last row {max(peer)})")
    print(
        f"ours alike on {len(common) - len(apart)} of {len(common)}; met among them: peer "
        f"{sum(peer[i] for i in common)}, ours {sum(ours[ids[i]] for i in common)}"
    )
    print(f"rows where the two part (first 20): {apart[:20]}")
