"""``python -m mara.report <section>``: tables from run folders, known answers on tiny runs, and a one-line refusal
(exit 2) for a folder that is missing or holds another kind of run."""

import json
import subprocess
import sys

import pytest

from mara.report.__main__ import main
from mara.report.commands import SECTIONS


def _paper_run(path, values: dict):
    """A paper-protocol run folder: ``values`` {method: [success rate per episode]} at one load and task set."""
    rows = [
        {"method": m, "task_set": "ID", "load": 0.04, "root": 0, "episode": i, "success_rate": v, "switches": 1}
        for m, vs in values.items()
        for i, v in enumerate(vs)
    ]
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps({"rows": rows}))
    return path


def _trace_run(path):
    rows = [
        {"method": m, "window": 0, "job_id": str(j), "deadline_met": int(j < k), "size_class": "1"}
        for m, k in (("MARA", 3), ("EDF", 2), ("ElasticFlow", 1))
        for j in range(4)
    ]
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.json").write_text(json.dumps({"protocol": {"trace": "x/cluster07.csv"}, "rows": rows}))
    return path


def test_paired_difference_is_the_mean_of_per_episode_differences(tmp_path, capsys):
    run = _paper_run(tmp_path / "r", {"A": [0.5, 0.7, 0.9], "B": [0.4, 0.7, 0.7]})
    assert main(["paired", str(run), "B", "A"]) == 0
    out = capsys.readouterr().out
    assert "| A | 70.00 | 1.0 |" in out and "| B | 60.00 | 1.0 |" in out
    assert "| A − B | +10.00 ± 5.77 |" in out  # differences 10, 0, 20: mean 10, s.e. 10 / sqrt(3)


def test_paired_runs_compare_a_method_of_two_runs(tmp_path, capsys):
    a = _paper_run(tmp_path / "a", {"X": [0.5, 0.7]})
    b = _paper_run(tmp_path / "b", {"X": [0.6, 0.9]})
    assert main(["paired-runs", f"ref={a}:X", f"new={b}:X"]) == 0
    assert "| new | 75.00 | 75.00 | +15.00 ± 5.00 (+15.00 ± 5.00) |" in capsys.readouterr().out


def test_trace_table_reads_share_met_and_the_paired_difference(tmp_path, capsys):
    assert main(["trace-table", str(_trace_run(tmp_path / "t"))]) == 0
    out = capsys.readouterr().out
    assert "| 07 | 0.750 ± 0.000 | 0.500 ± 0.000 | 0.250 ± 0.000 | — | — | 0.500 ± 0.000 | — |" in out


def test_compare_says_which_rows_differ_and_exits_1(tmp_path, capsys):
    a = _paper_run(tmp_path / "a", {"X": [0.5, 0.7]})
    b = _paper_run(tmp_path / "b", {"X": [0.5, 0.8]})
    assert main(["compare", str(a), str(a)]) == 0
    assert main(["compare", str(a), str(b)]) == 1
    assert "differing 1" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args",
    [
        ["paired", "{missing}", "B"],
        ["paired", "{trace}", "B"],  # a trace run where a paper-protocol evaluation is read
        ["paired-by-task-set", "{missing}", "B", "A"],
        ["paired-runs", "a={missing}:X"],
        ["ratio", "{paper}", "B", "high", "A"],
        ["compare", "{missing}", "{paper}"],
        ["trace-table", "{paper}"],  # a paper run where a trace run is read
        ["target-loss-windows", "{missing}", "01", "1", "EDF"],
        ["target-loss-breakdown", "{paper}", "x.csv"],
        ["paired"],  # the usage line
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_missing_or_foreign_run_is_refused_in_one_line(tmp_path, args):
    names = {
        "missing": tmp_path / "nope",
        "trace": _trace_run(tmp_path / "t"),
        "paper": _paper_run(tmp_path / "p", {"A": [0.5, 0.6], "B": [0.4, 0.5]}),
    }
    argv = [a.format(**names) for a in args]
    out = subprocess.run([sys.executable, "-m", "mara.report", *argv], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and not out.stdout


def test_help_lists_every_section():
    out = subprocess.run([sys.executable, "-m", "mara.report", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and all(f"mara.report {name} " in out.stdout for name in SECTIONS)


def test_suite_reads_every_setting_and_refuses_a_missing_one(tmp_path, capsys):
    from mara.report.suite import CLUSTERS, folder

    for name in CLUSTERS:
        _paper_run(tmp_path / folder(name), {"MARA-suite": [0.6, 0.8], "EDF": [0.5, 0.7], "FIFO": [0.4, 0.4]})
    assert main(["suite", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| **MARA-suite − best rule** | +10.00 ± 0.00 (EDF) |" in out
    assert "### Mean over the suite" in out
    assert (tmp_path / "suite_summary.json").is_file()
    assert main(["suite", str(tmp_path), "sizes"]) == 2
