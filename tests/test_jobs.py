"""mara.core.jobs: the resumable job graph behind experiment=paper (order, failures, resume, per-job logs)."""

import json
import time

import pytest

from mara.core.jobs import Job, critical_path, last_percent, run_jobs


def _write(tag: str, out: str, *, deps: dict) -> dict:
    print(f"job {tag} running:  50.0% halfway")
    with open(out, "a") as fh:
        fh.write(f"{tag} {time.time()} {json.dumps(deps, sort_keys=True)}\n")
    return {"tag": tag}


def _boom(*, deps: dict) -> dict:
    raise ValueError("the data\nare bad")


def test_dependencies_failures_and_resume(tmp_path):
    trace = tmp_path / "trace.txt"
    jobs = [
        Job("a", tmp_path / "a", _write, ("a", str(trace)), cost=1),
        Job("bad", tmp_path / "bad", _boom, cost=5),
        Job("c", tmp_path / "c", _write, ("c", str(trace)), deps=("a", "bad"), cost=1),
    ]
    results, errors = run_jobs(jobs, workers=2, title="t", poll_s=0.5)
    assert set(results) == {"a", "c"} and set(errors) == {"bad"}
    assert errors["bad"] == "ValueError: the data are bad"  # one line
    lines = trace.read_text().splitlines()
    assert [ln.split()[0] for ln in lines] == ["a", "c"]  # c waited for both of its dependencies
    assert json.loads(lines[1].split(" ", 2)[2]) == {
        "a": {"tag": "a", "wall_s": pytest.approx(results["a"]["wall_s"])},
        "bad": None,
    }
    assert (tmp_path / "a" / "DONE.json").exists() and not (tmp_path / "bad" / "DONE.json").exists()
    assert "job a running" in (tmp_path / "a" / "job.log").read_text()  # the worker's prints go to its own log
    assert last_percent(tmp_path / "a" / "job.log") == 0.5
    # a rerun skips the finished jobs and retries the failed one
    results, errors = run_jobs(jobs, workers=2, title="t", poll_s=0.5)
    assert len(trace.read_text().splitlines()) == 2 and set(errors) == {"bad"}


def test_bad_graphs_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown job 'x'"):
        run_jobs([Job("a", tmp_path / "a", _write, deps=("x",))], workers=1)
    with pytest.raises(ValueError, match="duplicate"):
        run_jobs([Job("a", tmp_path / "a", _write), Job("a", tmp_path / "b", _write)], workers=1)
    with pytest.raises(ValueError, match="cycle"):
        run_jobs(
            [Job("a", tmp_path / "a", _write, deps=("b",)), Job("b", tmp_path / "b", _write, deps=("a",))], workers=1
        )


def test_a_short_job_gating_long_ones_starts_first(tmp_path):
    jobs = [
        Job("fm", tmp_path, _write, cost=4),
        Job("train", tmp_path, _write, deps=("fm",), cost=8),
        Job("eval", tmp_path, _write, deps=("train",), cost=5),
        Job("bound", tmp_path, _write, cost=12),
    ]
    assert critical_path(jobs) == {"fm": 17, "train": 13, "eval": 5, "bound": 12}


def test_a_copied_run_resumes_its_jobs_from_its_own_files(tmp_path):
    """A job's marker names the files of its folder relative to it: a copied run's finished jobs hand on the copy's
    files; a marker naming a file outside its folder is one line."""
    import shutil

    from mara.core.config import ConfigError
    from mara.core.jobs import MARKER, done_info, mark_done

    mark_done(tmp_path / "a" / "job", {"best_ckpt": str(tmp_path / "a" / "job" / "best.ckpt"), "seed": 0})
    assert json.loads((tmp_path / "a" / "job" / MARKER).read_text())["best_ckpt"] == "best.ckpt"
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert done_info(tmp_path / "b" / "job") == {"best_ckpt": str(tmp_path / "b" / "job" / "best.ckpt"), "seed": 0}
    (tmp_path / "b" / "job" / MARKER).write_text(json.dumps({"best_ckpt": str(tmp_path / "a" / "job" / "best.ckpt")}))
    with pytest.raises(ConfigError, match="outside this run folder"):
        done_info(tmp_path / "b" / "job")
