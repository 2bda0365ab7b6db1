"""The harness around the ElasticFlow authors' simulator: reading its output, the trace cases, the results record,
the side-by-side table; and (slow, needs the peer's environment) a real run of the peer on a tiny trace."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mara.peers.cases import CASES, case_named, first_by_submission
from mara.peers.elasticflow import (
    DEFAULT_PEER_ROOT,
    PeerLog,
    PeerResult,
    PeerUnavailable,
    decided_outcomes,
    job_outcomes,
    outcomes_agree,
    read_ratio,
    scan_log,
)
from mara.peers.record import case_entry, needs_run, put_result
from mara.peers.side_by_side import (
    compare_row,
    markdown_table,
    merge_rows,
    per_job_agreement,
    read_ours,
)

ROOT = Path(__file__).resolve().parents[1]

# lines in the shapes the peer prints (its stdout with --print)
PEER_LINES = [
    "0-3, 0, 0 ",
    "----job[4]'s DDL request cannot be satisfied. Declined.",
    "**** job[1] completed",
    "ends at 1200 1262.0 ddl 5000",
    "**** job[2] completed",
    "ends at 1800 1903.0 ddl 1850",
    "{'job_id': 'x', 'job_idx': 2, 'real_end_time': 1890, 'ddl': 1850}",
    "{'job_id': 'y', 'job_idx': 7}",  # a record not right after an end line is not a late finish
    "----job[5]'s DDL request is not satisfied. Declined.",
    "accepted jobs: 3",
    "declined jobs: 4",
    "accepted jobs: 4",
    "declined jobs: 3",
]


def test_scan_log_names_refused_and_late_jobs_and_keeps_the_last_counts():
    log = scan_log(PEER_LINES)
    assert log.refused == {4}
    assert log.late == {2, 5}
    assert (log.accepted, log.declined) == (4, 3)
    assert log.completed == {1, 2}


def test_decided_outcomes_are_what_the_log_settles_so_far():
    # job 1 completed in time, job 2 completed late, 4 refused, 5 late (EDF's message); job 3 is still running
    assert decided_outcomes(scan_log(PEER_LINES)) == {1: 1, 2: 0, 4: 0, 5: 0}


def test_job_outcomes_per_row_best_effort_uncounted():
    log = PeerLog(refused={1}, late={3})
    met = job_outcomes([False, False, True, False, False], log)
    assert met == [1, 0, None, 0, 1]
    assert outcomes_agree(met, 0.5) and not outcomes_agree(met, 0.75)


def test_read_ratio_takes_the_last_row(tmp_path):
    f = tmp_path / "final_result.csv"
    f.write_text(
        "time,ddl_satis_ratio,cluster_spec,trace_file,scheduler,scheme\n"
        "t0,0.5,a,b,edf,elastic\nt1,0.757,a,b,ef-accessctrl,elastic\n"
    )
    assert read_ratio(f) == pytest.approx(0.757)
    f.write_text("time,ddl_satis_ratio\n")
    with pytest.raises(ValueError):
        read_ratio(f)


def test_first_by_submission_is_stable_and_keeps_columns(tmp_path):
    src, dst = tmp_path / "t.csv", tmp_path / "o.csv"
    src.write_text("job_id,submission_time,num_gpu\na,30,1\nb,10,2\nc,30,4\nd,20,8\n")
    assert first_by_submission(src, dst, 3) == 3
    rows = list(csv.DictReader(dst.read_text().splitlines()))
    assert [r["job_id"] for r in rows] == ["b", "d", "a"]
    assert list(rows[0]) == ["job_id", "submission_time", "num_gpu"]
    assert first_by_submission(src, dst, None) == 4
    assert [r["job_id"] for r in csv.DictReader(dst.read_text().splitlines())] == ["b", "d", "a", "c"]


def test_cases_are_named_once_and_pair_clusters_as_the_peer_does():
    names = [c.name for c in CASES]
    assert len(set(names)) == len(names)
    assert case_named("fig10").cluster == "n16g8"
    assert case_named("cluster01_first300").cluster == "n64g8" and case_named("cluster04").cluster == "n128g8"
    assert all({"EDF", "ElasticFlow"} <= set(c.methods) for c in CASES)
    with pytest.raises(ValueError, match="unknown case"):
        case_named("cluster99")


def test_a_limit_given_by_the_user_wins_over_a_cases_limit_for_a_slow_method():
    whole = case_named("cluster01")
    assert whole.limits["ElasticFlow"] < 9000
    assert whole.limit_s("ElasticFlow", 9000.0, 900.0) == 9000.0
    assert whole.limit_s("ElasticFlow", None, 900.0) == whole.limits["ElasticFlow"]
    assert whole.limit_s("EDF", None, 900.0) == 900.0


def test_record_reuses_a_result_only_for_the_same_file_and_retries_a_timeout_under_a_longer_limit():
    record = {"cases": {}}
    case = case_named("cluster01_first300")
    entry = case_entry(record, case, "sha-a", 300)
    assert needs_run(entry, "EDF", 900)
    put_result(entry, PeerResult("EDF", "edf", "ok", 1.0, 900, ratio=0.4, deadline_met=[1, 0, None]), "cmd")
    assert not needs_run(entry, "EDF", 900)
    assert entry["results"]["EDF"]["missed_rows"] == [1] and entry["results"]["EDF"]["jobs_counted"] == 2
    put_result(entry, PeerResult("ElasticFlow", "ef-accessctrl", "timeout", 600.0, 600), "cmd")
    assert not needs_run(entry, "ElasticFlow", 600) and needs_run(entry, "ElasticFlow", 1200)
    assert case_entry(record, case, "sha-b", 300)["results"] == {}  # another file: nothing carried over


def _ours(tmp_path, rows, wrap=True):
    f = tmp_path / "results.json"
    f.write_text(json.dumps({"rows": rows} if wrap else rows))
    return f


def test_read_ours_ratio_and_jobs_from_results_rows(tmp_path):
    rows = [{"method": "EDF", "window": 0, "job_id": j, "deadline_met": m} for j, m in (("a", 1), ("b", 0), ("c", 1))]
    rows.append({"method": "ElasticFlow", "window": 0, "job_id": "a", "deadline_met": 0})
    for wrap in (True, False):
        run = read_ours(_ours(tmp_path, rows, wrap), "EDF")
        assert run.status == "ok" and run.ratio == pytest.approx(2 / 3) and run.n_windows == 1
        assert run.met_by_job == {"a": 1, "b": 0, "c": 1}
    f = tmp_path / "timed.json"
    f.write_text(json.dumps({"rows": rows, "timings": {"EDF": 0.25, "ElasticFlow": 3.0}, "timings_cpu": {"EDF": 0.2}}))
    timed = read_ours(f, "EDF")
    assert (timed.replay_seconds, timed.replay_cpu_seconds) == (0.25, 0.2)  # the replay alone, timed in the process
    assert read_ours(_ours(tmp_path, rows), "Themis").status == "failed"


def test_side_by_side_row_and_table():
    ids = ["a", "b", "c", "d"]
    peer = {
        "status": "ok",
        "ratio": 0.5,
        "seconds": 100.0,
        "cpu_seconds": 40.0,
        "missed_rows": [1, 3],
        "jobs_counted": 4,
    }
    from mara.peers.side_by_side import OurRun

    ours = OurRun(
        "EDF",
        "ok",
        seconds=2.0,
        replay_seconds=0.5,
        replay_cpu_seconds=0.4,
        ratio=0.75,
        met_by_job={"a": 1, "b": 1, "c": 1, "d": 0},
    )
    assert per_job_agreement(peer["missed_rows"], 4, ids, ours.met_by_job) == (3, 4)
    row = compare_row("x", "EDF", peer, ours, ids)
    assert row["difference"] == pytest.approx(0.25) and row["speedup"] == pytest.approx(50.0)
    assert row["replay_speedup"] == pytest.approx(200.0) and row["replay_cpu_speedup"] == pytest.approx(100.0)
    assert (row["jobs_agree"], row["jobs_compared"]) == (3, 4)
    cut = compare_row(
        "x",
        "ElasticFlow",
        {"status": "timeout", "seconds": 600.0, "limit_s": 600},
        OurRun("ElasticFlow", "unavailable", error="not here"),
        ids,
    )
    table = markdown_table([row, cut])
    assert "| x | EDF | 0.500 | 0.750 | +0.250 | 3/4 | 100.0 | 40.0 | 2.0 | 0.50 | 200.0 | 100.0 |" in table
    assert "| x | ElasticFlow | timeout | unavailable | - | - | > 600 (limit) | - | - | - | - | - |" in table
    slow = compare_row("x", "EDF", dict(peer, status="timeout"), ours, ids)
    assert "| > 200.0 | > 100.0 |" in markdown_table([slow])  # a peer cut by its limit: a lower bound


def test_peer_commands_refuse_bad_input_with_one_line():
    commands = (
        ["-m", "mara.peers", "run", "--method", "Bogus"],
        ["-m", "mara.peers", "fidelity", "--case", "nope"],
        ["-m", "mara.peers", "bench", "--case", "nope"],
        ["-m", "mara.peers", "bench", "--limit", "0"],  # not "no limit" for the peer and an instant cut for ours
        ["-m", "mara.peers", "bench", "--limit", "-5"],
        ["-m", "mara.peers", "run", "--time-limit", "0"],
        ["-m", "mara.peers", "fidelity", "--time-limit", "-1"],
        ["-m", "mara.peers", "nope"],
    )
    for args in commands:
        out = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, check=False)
        assert out.returncode == 2, out.stderr
        assert out.stderr.count("\n") == 1 and out.stderr.startswith("error:")


# a tiny trace with known answers: job a needs ~4,700 s of its best speed but has 600 s; b and c are easy
TINY = (
    "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
    "a,0,100000,resnet50,600,128,1,1000\n"
    "b,20000,1000,resnet50,30000,128,1,300\n"
    "c,40000,2000,resnet50,50000,64,1,300\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["EDF", "ElasticFlow"])
def test_peer_runs_a_tiny_trace_and_its_outcomes_are_read(tmp_path, method):
    from mara.peers.elasticflow import ensure_venv, run_peer

    if not (DEFAULT_PEER_ROOT / "scheduler" / "scheduler.py").is_file():
        pytest.skip("the peer's simulator is not beside the repository (../shared/peers/elasticflow)")
    try:
        python = ensure_venv()
    except PeerUnavailable as exc:
        pytest.skip(f"the peer's environment cannot be made here: {exc}")
    trace = tmp_path / "tiny.csv"
    trace.write_text(TINY)
    kept = tmp_path / "logs" / "peer.log"
    res = run_peer(trace, "n1g8", method, python=python, time_limit_s=120, keep_log=kept)
    assert res.status == "ok", res.error
    assert 0 < res.cpu_seconds and 0 < res.seconds
    assert res.ratio == pytest.approx(2 / 3)
    assert res.deadline_met == [0, 1, 1]
    # the kept log is the one read: it names the same missed job
    again = scan_log(kept.read_text().splitlines(keepends=True))
    assert again.refused | again.late == {0}


def test_bench_rows_say_a_time_limit_and_a_lower_bound(capsys):
    from mara.peers.bench import print_peer_rows

    print_peer_rows(
        [
            {
                "case": "c",
                "method": "EDF",
                "peer_seconds": 12.0,
                "peer_status": "ok",
                "peer_cpu_seconds": 6.0,
                "limit_s": 300,
                "peer_ratio": 0.4,
                "our_status": "ok",
                "our_seconds": 30.0,
                "our_ratio": 0.41,
                "our_replay_seconds": 0.25,
                "our_replay_cpu_seconds": 0.2,
                "speedup": 0.4,
                "replay_speedup": 48.0,
                "replay_cpu_speedup": 30.0,
            },
            {
                "case": "c",
                "method": "ElasticFlow",
                "peer_seconds": 300.2,
                "peer_status": "timeout",
                "limit_s": 300,
                "peer_ratio": None,
                "our_status": "ok",
                "our_seconds": 31.0,
                "our_ratio": 0.7,
                "our_replay_seconds": 2.0,
                "replay_speedup": 150.1,
            },
            {"error": "no peer environment"},
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert "12.00" in out[0] and "ratio 0.4" in out[0] and "6.00" in out[1]
    assert "30.00" in out[2] and "start-up included" in out[2] and "0.250" in out[3]
    assert "CPU" in out[4] and "0.200" in out[4]
    assert "peer wall / our replay" in out[5] and "48.0" in out[5] and ">= 20" in out[5]
    assert "peer CPU / our replay" in out[6] and "30.0" in out[6]
    assert "our process" in out[7]
    assert "> 300 (limit)" in out[8] and ">= 150.1" in "".join(out[9:])  # a peer cut by its limit: a lower bound
    assert "unavailable" in out[-1] and "no peer environment" in out[-1]


def test_merge_rows_replaces_the_same_case_and_method_and_keeps_the_case_order():
    old = [
        {"case": "cluster03", "method": "EDF", "our_ratio": 0.1},
        {"case": "cluster01", "method": "EDF", "our_ratio": 0.2},
        {"case": "cluster01", "method": "Gandiva", "our_ratio": 0.3},
    ]
    new = [{"case": "cluster01", "method": "EDF", "our_ratio": 0.9}, {"case": "x", "method": "EDF"}]
    rows = merge_rows(old, new, ["cluster01", "cluster03"])
    assert [(r["case"], r["method"]) for r in rows] == [
        ("cluster01", "EDF"),
        ("cluster01", "Gandiva"),
        ("cluster03", "EDF"),
        ("x", "EDF"),
    ]
    assert rows[0]["our_ratio"] == 0.9  # the fresh row wins
    assert merge_rows(old, [], ["cluster01"]) == sorted(old, key=lambda r: (r["case"] != "cluster01", r["method"]))


def test_record_text_reads_back_the_same_and_keeps_a_runs_rows_on_one_line():
    from mara.peers.record import record_text

    rec = {"cases": {"c": {"results": {"EDF": {"missed": list(range(500)), "ratio": 0.5, "x": [1.5, -2, 3]}}}}}
    text = record_text(rec)
    assert json.loads(text) == rec
    assert text.count("\n") < 20
