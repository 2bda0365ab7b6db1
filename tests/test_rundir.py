"""Run folders: one live run per folder (a lock the kernel drops with the process), results merged by method, a
rerun of the pipeline resumes what finished (a killed policy stage from its last checkpoint, exactly), fresh=true."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from mara.core import results, rundir
from mara.core.config import CONF_DIR, ConfigError
from mara.evaluate import evaluate

REPO = Path(__file__).resolve().parents[1]
TIME_KEYS = {"solve_time_s"}  # wall time, not a result


def _env():
    return dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")


def _start(*args, log=None):
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env=_env(),
        text=True,
        stdout=subprocess.PIPE if log is None else log,
        stderr=subprocess.STDOUT if log else subprocess.PIPE,
    )


def _run(*args):
    return subprocess.run([sys.executable, *args], cwd=REPO, env=_env(), capture_output=True, text=True)


def tiny(tmp_path, bank_path, *extra):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(
            "evaluate",
            overrides=[
                f"bank.path={bank_path}",
                "eval.roots=1",
                "eval.episodes=2",
                "sim.loads=[0.04]",
                f"paths.output_dir={tmp_path}",
                "eval.tensorboard=false",
                *extra,
            ],
        )


def _rows(path):
    rows = json.loads(Path(path).read_text())["rows"]
    return sorted((tuple(sorted((k, v) for k, v in r.items() if k not in TIME_KEYS)) for r in rows), key=str)


# ------------------------------------------------------------------------------------------------------- the lock
def test_lock_is_exclusive_reentrant_and_released(tmp_path):
    holder = _start(
        "-c",
        f"from mara.core import rundir; import time; rundir.acquire({str(tmp_path)!r}); "
        "print('held', flush=True); time.sleep(60)",
    )
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(rundir.RunFolderBusy, match=f"pid {holder.pid}"):
        rundir.acquire(tmp_path)
    holder.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel drops the lock with the process
    holder.wait()
    rundir.acquire(tmp_path)
    rundir.acquire(tmp_path)  # the same process again (the pipeline's nested evaluation)
    rundir.release(tmp_path)
    probe = _run("-c", f"from mara.core import rundir; rundir.acquire({str(tmp_path)!r})")
    assert probe.returncode != 0 and "in use by a live run" in probe.stderr  # still held once
    rundir.release(tmp_path)
    assert _run("-c", f"from mara.core import rundir; rundir.acquire({str(tmp_path)!r})").returncode == 0


def test_busy_folder_refused_with_one_line_then_rerun_merges(tmp_path, small_bank):
    common = [
        f"bank.path={small_bank.path}",
        "eval.roots=1",
        "eval.episodes=1",
        "sim.loads=[0.04]",
        "eval.tensorboard=false",
        f"hydra.run.dir={tmp_path}",
    ]
    rundir.acquire(tmp_path)  # a live run holds the folder
    try:
        p = _run("-m", "mara.evaluate", "methods=[EDF]", *common)
    finally:
        rundir.release(tmp_path)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and "in use by a live run" in lines[0], p.stderr
    assert not (tmp_path / "results.json").exists()  # refused before any work
    # two evaluations started together: each either runs or is refused cleanly; rerunning the refused one merges
    procs = {m: _start("-m", "mara.evaluate", f"methods=[{m}]", *common) for m in ("FIFO", "EDF")}
    for m, proc in procs.items():
        _, err = proc.communicate()
        if proc.returncode == 2:
            assert "in use by a live run" in err and "Traceback" not in err
            assert _run("-m", "mara.evaluate", f"methods=[{m}]", *common).returncode == 0
        else:
            assert proc.returncode == 0, err
    data = json.loads((tmp_path / "results.json").read_text())
    assert sorted({r["method"] for r in data["rows"]}) == ["EDF", "FIFO"] and len(data["rows"]) == 6  # 3 task sets each


# ------------------------------------------------------------------------------------------------------ the results
def test_results_merge_by_method_and_keep_their_settings(tmp_path, small_bank):
    evaluate(
        tiny(tmp_path, small_bank.path, "methods=[FIFO,Clairvoyant]", "+method_overrides={Clairvoyant: {workers: 1}}")
    )
    first = _rows(tmp_path / "results.json")
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[Oracle]"))  # another method: the earlier rows stay
    data = json.loads((tmp_path / "results.json").read_text())
    assert {r["method"] for r in data["rows"]} == {"FIFO", "Clairvoyant", "Oracle"} and set(res["timings"]) == {
        "Oracle"
    }
    assert data["method_overrides"] == {"Clairvoyant": {"workers": 1}}  # kept with the rows it belongs to
    assert [r for r in _rows(tmp_path / "results.json") if dict(r)["method"] != "Oracle"] == first
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO]"))  # resume by default: FIFO not evaluated again
    assert "FIFO" not in res["timings"]
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO]", "eval.resume=false"))
    assert "FIFO" in res["timings"] and {r["method"] for r in res["rows"]} == {"FIFO", "Clairvoyant", "Oracle"}
    # another protocol: the earlier file is moved aside, not replaced
    evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO]", "eval.episodes=1"))
    aside = list(tmp_path.glob("results.superseded-*.json"))
    assert len(aside) == 1 and {r["method"] for r in json.loads(aside[0].read_text())["rows"]} == {
        "FIFO",
        "Clairvoyant",
        "Oracle",
    }
    assert {r["method"] for r in json.loads((tmp_path / "results.json").read_text())["rows"]} == {"FIFO"}


def test_changed_checkpoint_is_evaluated_again(tmp_path):
    ckpt = tmp_path / "p.ckpt"
    ckpt.write_bytes(b"one")
    over = {"MARA": {"checkpoints": [{"train_seed": 0, "ckpt_path": str(ckpt)}]}}
    base = {"protocol": {"episodes": 1}, "bank": "b", "method_overrides": over}
    row = {"method": "MARA", "success_rate": 0.5}
    (tmp_path / "results.json").write_text(
        json.dumps({**base, "rows": [row], "checkpoint_digests": results.checkpoint_digests(over)})
    )
    assert results.earlier_results(tmp_path / "results.json", base, ["MARA"]).done == {"MARA": [row]}
    ckpt.write_bytes(b"two")  # same path, another policy
    assert results.earlier_results(tmp_path / "results.json", base, ["MARA"]).done == {}


def test_fresh_sets_everything_aside(tmp_path, small_bank):
    evaluate(tiny(tmp_path, small_bank.path, "methods=[FIFO]"))
    (tmp_path / "evaluate.log").write_text("log\n")
    res = evaluate(tiny(tmp_path, small_bank.path, "methods=[EDF]", "fresh=true"))
    assert {r["method"] for r in res["rows"]} == {"EDF"}
    aside = list((tmp_path / "superseded").iterdir())
    assert len(aside) == 1 and (aside[0] / "results.json").exists() and (tmp_path / "evaluate.log").exists()


# ------------------------------------------------------------------------------------------------------ the stages
def test_stage_reused_resumed_or_refused(tmp_path):
    cfg = OmegaConf.create(
        {
            "seed": 0,
            "predictor": {"name": "fm", "lr": 1.0},
            "bank": {"path": None},
            "trainer": {},
            "mat": {"x": 1},
            "reward": "dense",
            "sim": {"loads": [0.04], "nodes": 7},
            "ckpt_path": None,
        }
    )
    calls = []

    def work(c):
        calls.append(c.get("ckpt_path"))
        return {"n": len(calls)}

    stage = tmp_path / "policy"
    rundir.plan_stage(stage, rundir.stage_settings(cfg, "policy"))
    assert rundir.run_stage(stage, work, cfg, "policy", resume_file="last.ckpt") == {"n": 1}
    assert rundir.run_stage(stage, work, cfg, "policy", resume_file="last.ckpt") == {"n": 1} and calls == [
        None
    ]  # reused
    # an attempt that stopped: resumed from its checkpoint, its TensorBoard events set aside
    (stage / "stage.json").write_text(json.dumps({"settings": rundir.stage_settings(cfg, "policy"), "done": False}))
    (stage / "last.ckpt").write_bytes(b"")
    (stage / "tb").mkdir()
    (stage / "tb" / "events.out.tfevents.1").write_bytes(b"")
    assert rundir.run_stage(stage, work, cfg, "policy", resume_file="last.ckpt") == {"n": 2}
    assert calls[-1] == str(stage / "last.ckpt") and (stage / "tb" / "attempt_1" / "events.out.tfevents.1").exists()
    # the evaluation loads do not touch the policy; its own settings do (refused before any work, one line)
    rundir.plan_stage(stage, rundir.stage_settings(OmegaConf.merge(cfg, {"sim": {"loads": [0.07]}}), "policy"))
    with pytest.raises(ConfigError, match=r"mat.x: 1 → 2\); rerun with fresh=true"):
        rundir.plan_stage(stage, rundir.stage_settings(OmegaConf.merge(cfg, {"mat": {"x": 2}}), "policy"))


def _wait_for(pred, proc):
    """Poll until ``pred()`` holds; no time limit (a busy machine only makes it later): the run ending first fails."""
    while not pred():
        assert proc.poll() is None, "the run ended before the moment to kill it"
        time.sleep(0.05)


@pytest.mark.slow
def test_killed_training_resumes_exactly(tmp_path):
    """SIGKILL mid-policy, rerun the same command: the FM is reused (not retrained), the policy continues from its
    last checkpoint, and the weights and results equal those of a run never interrupted. experiment=smoke runs without
    the FM cache: its entries are not checkpointed, and FM outputs differ at float rounding with the batch they are
    computed in, so with the cache a resumed training is not bit for bit the uninterrupted one
    (docs/protocol.md)."""
    cmd = ["-m", "mara.train", "experiment=smoke", "eval.tensorboard=false"]
    whole_log = open(tmp_path / "whole.log", "w")
    whole = _start(
        *cmd, f"hydra.run.dir={tmp_path}/whole", log=whole_log
    )  # the uninterrupted reference, beside the killed one
    run = tmp_path / "killed"
    with open(tmp_path / "first.log", "w") as out:
        first = _start(*cmd, f"hydra.run.dir={run}", log=out)
        last = run / "policy" / "checkpoints" / "last.ckpt"
        _wait_for(lambda: last.exists() and "policy (" in (tmp_path / "first.log").read_text(), first)
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert not (run / "evaluation").exists()  # killed mid-policy
    fm = run / "predictor" / "fm.ckpt"
    fm_mtime = fm.stat().st_mtime_ns
    whole.wait()
    whole_log.close()
    assert whole.returncode == 0, (tmp_path / "whole.log").read_text()[-3000:]
    p = _run(*cmd, f"hydra.run.dir={run}")
    said = p.stdout + p.stderr  # Hydra's log lines go to stdout
    assert p.returncode == 0, said[-3000:]
    assert "resume: predictor stage finished in this run folder, reused" in said
    assert f"resume: policy stage continues from {last}" in said
    assert fm.stat().st_mtime_ns == fm_mtime and "predictor (FM)" not in said  # the FM was not retrained
    assert list((run / "policy" / "tb").glob("attempt_1/events.out.tfevents.*"))  # the killed attempt's events apart
    assert _rows(run / "evaluation" / "results.json") == _rows(tmp_path / "whole" / "evaluation" / "results.json")
    weights = [
        torch.load(d / "policy" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)["state_dict"]
        for d in (run, tmp_path / "whole")
    ]
    assert weights[0].keys() == weights[1].keys() and all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    val = [
        json.loads((d / "policy" / "checkpoints" / "validation.json").read_text()) for d in (run, tmp_path / "whole")
    ]
    assert [[(h["iteration"], h["val_success_rate"]) for h in v["history"]] for v in val] == [
        [(h["iteration"], h["val_success_rate"]) for h in val[1]["history"]]
    ] * 2
