"""A user's job file: one-line checks (exit 2) before any training, exact preempt/resume of a user job, a 3-job live
run end to end (outcomes, timeline, TensorBoard, curves replayed decision for decision), a crashing job failing
alone."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mara.core.cli import run_cli
from mara.core.config import ConfigError
from mara.curves.bank import load_bank
from mara.live.band import band_exit
from mara.live.job import TrainingJob, UserJobSpec
from mara.live.jobfile import parse_jobs
from mara.live.jobs import check_job, choose_methods
from mara.live.schedule import schedule
from mara.live.workers import ProcessPool

REPO = Path(__file__).resolve().parents[1]
MLP = {"_target_": "examples.user_jobs.MLPClassifier", "hidden": 16, "lr": 0.003}
BLOBS = {"_target_": "examples.user_jobs.BlobData", "n": 256, "batch_size": 16}

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def job(name="a", **kw):
    return {"name": name, "module": MLP, "data": BLOBS, "target": {"loss": 1.5}, "deadline": {"steps": 10}, **kw}


@pytest.fixture
def bad_module(tmp_path, monkeypatch):
    """An importable module whose training_step returns no loss."""
    (tmp_path / "badjobs.py").write_text(
        textwrap.dedent("""
        import torch
        from examples.user_jobs import MLPClassifier

        class NoLoss(MLPClassifier):
            def training_step(self, batch, batch_idx):
                self.net(batch[0])
                return None

        class Explodes(MLPClassifier):
            def training_step(self, batch, batch_idx):
                if batch_idx >= 4:
                    raise RuntimeError("out of memory (simulated)")
                return super().training_step(batch, batch_idx)
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "badjobs.NoLoss"


@pytest.mark.parametrize(
    "change, field",
    [
        ({"module": "examples.user_jobs.MLPClassifier"}, "module"),  # not a {_target_: ...} mapping
        ({"target": None}, "target"),
        ({"deadline": {"steps": -5}}, "deadline.steps"),
        ({"deadline": {"minutes": 0}}, "deadline.minutes"),
        ({"deadline": {"hours": 2}}, "deadline"),
        ({"arrival": -1}, "arrival"),
        (
            {"target": {"metric": "val/acc", "mode": "max", "value": 0.9}},
            "target.loss",
        ),  # the scheduler's ε is required
        ({"target": {"accuracy": 0.9}}, "target"),
    ],
)
def test_bad_job_names_job_and_field(change, field):
    with pytest.raises(ConfigError) as err:
        parse_jobs([job("ok"), {**job("bad"), **change}])
    assert "job 'bad'" in str(err.value) and f": {field}:" in str(err.value) and "\n" not in str(err.value)


def test_deadline_in_minutes_becomes_steps():
    jobs = parse_jobs({"step_seconds": 2.0, "jobs": [job("m", deadline={"minutes": 1.01}), job("s", arrival="start")]})
    assert [j.budget for j in jobs] == [31, 10] and jobs[1].arrival == 0
    assert parse_jobs([job("m", deadline={"minutes": 1})])[0].budget is None  # measured before the run


def test_band_check_known_curves():
    """A running mean that is an exact power law stays in its band; one whose loss jumps after the fit leaves it."""
    s = np.arange(1, 201, dtype=np.float64)
    power = np.diff(np.concatenate([[0.0], 3.0 * s**0.7]))  # C(s) = 3 s^0.7, so L(s) = 3 s^-0.3 exactly
    assert band_exit(power, 10) == {
        "checked": True,
        "fitted_batches": 100,
        "slope": pytest.approx(-0.3),
        "slope_se": pytest.approx(0.0, abs=1e-6),
        "left_at_batch": None,
    }
    jump = power.copy()
    jump[120:] = 5.0
    res = band_exit(jump, 10)
    assert res["left_at_batch"] == 130 and res["observed"] > res["band"][1]
    assert band_exit(power[:70], 10) == {"checked": False}  # 7 observations: too few to fit half and check half


def test_unknown_import_path_is_one_line():
    with pytest.raises(
        ConfigError, match=r"job 'bad': module._target_: cannot import 'examples.user_jobs.NoSuchModel'"
    ):
        check_job(0, parse_jobs([job("bad", module={"_target_": "examples.user_jobs.NoSuchModel"})])[0], "jobs")


def test_training_step_without_loss_is_one_line(bad_module):
    with pytest.raises(ConfigError, match=r"job 'bad': module.training_step: returns no loss"):
        check_job(0, parse_jobs([job("bad", module={"_target_": bad_module})])[0], "jobs")


def test_cli_bad_inputs_exit_2_with_one_line(tmp_path):
    """Through the entry point: a file that is not YAML, and a negative deadline, each one stderr line and status 2."""
    cases = {
        "notyaml.yaml": ("jobs: [a, b\n  - : }", "not valid YAML"),
        "negative.yaml": (
            json.dumps({"jobs": [job("neg", deadline={"steps": -3})]}),
            "job 'neg': deadline.steps: must be > 0",
        ),
    }
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name, (text, expected) in cases.items():
        (tmp_path / name).write_text(text)
        r = subprocess.run(
            [sys.executable, "-m", "mara.live", f"jobs={tmp_path / name}", f"paths.output_dir={tmp_path / 'out'}"],
            check=False,
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
        )
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1 and expected in lines[0], r.stderr


def test_method_auto_refuses_mara_where_its_policy_does_not_fit():
    from hydra import compose, initialize_config_dir

    from mara.core.config import CONF_DIR
    from mara.live.run import settings_of

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        run = settings_of(compose("live", overrides=["jobs_methods=auto"]))
    assert choose_methods(run, {"nodes": 2, "max_active": 4}) == (["MARA"], None)
    methods, note = choose_methods(run, {"nodes": 3, "max_active": 5})
    assert methods == ["EDF"] and "supports M=2 nodes, K=4" in note


def test_mara_refuses_a_cluster_size_it_was_not_trained_for(tmp_path):
    with pytest.raises(ConfigError, match=r"was trained for M=2, K=4; this run has sim.nodes=3, sim.max_active=5"):
        schedule([job("a")], [f"paths.output_dir={tmp_path}", "jobs_methods=[MARA]", "sim.nodes=3", "sim.max_active=5"])


def test_user_job_preempted_moved_resumed_equals_uninterrupted():
    """A user job run 4 batches in one worker process, exported, resumed in a fresh process (another node) for 7
    more gives bit-identical losses to 11 uninterrupted batches (the data position and Adam moments travel)."""
    spec = check_job(0, parse_jobs([job("mlp", seed=5)])[0], "jobs")
    batches = [1] * 11  # one batch per step

    def losses(pool, j, n):
        return [pool.run([j])[j] for _ in range(n)]

    whole = ProcessPool()
    whole.start(spec)
    ref = losses(whole, 0, len(batches))
    whole.close()
    first, second = ProcessPool(), ProcessPool()
    first.start(spec)
    head = losses(first, 0, 4)
    state = first.export(0)
    first.close()
    second.start(spec, state)
    tail = losses(second, 0, 7)
    second.close()
    assert head + tail == ref
    assert len(set(ref)) > 5  # the losses really change batch to batch


def test_metric_job_preempted_moved_resumed_validates_as_uninterrupted():
    """A job with a metric target validated every 3 batches: 4 batches in one worker process, exported, 7 more in a
    fresh process give bit-identical losses and validation values (at batches 3, 6, 9) to 11 uninterrupted batches."""
    from mara.live.workers import NodeStep

    target = {"metric": "val/acc", "mode": "max", "value": 0.99, "loss": 1.0, "every": 3}
    spec = check_job(0, parse_jobs([job("mlp", seed=5, target=target)])[0], "jobs")
    assert spec.val_metric == "val/acc" and spec.val_every == 3

    def steps(pool, n):
        res = [pool.work({0: NodeStep()})[0] for _ in range(n)]
        return [r.losses[0] for r in res], [m for r in res for m in r.metrics]

    whole = ProcessPool()
    whole.start(spec)
    ref, ref_metrics = steps(whole, 11)
    whole.close()
    first, second = ProcessPool(), ProcessPool()
    first.start(spec)
    head, head_metrics = steps(first, 4)
    state = first.export(0)
    first.close()
    second.start(spec, state)
    tail, tail_metrics = steps(second, 7)
    second.close()
    assert head + tail == ref and head_metrics + tail_metrics == ref_metrics
    assert [s for s, _ in ref_metrics] == [3, 6, 9] and len({v for _, v in ref_metrics}) > 1  # the metric moves


def three_jobs():
    cnn = {"_target_": "examples.user_jobs.TinyCNN", "width": 4, "lr": 0.003}
    cifar = {"_target_": "examples.user_jobs.Cifar10Subset", "n": 256, "batch_size": 16, "source": "synthetic"}
    return [
        job("mlp_a", target={"loss": 1.9}, deadline={"steps": 40}),
        job("cnn", module=cnn, data=cifar, target={"loss": 2.25}, deadline={"steps": 30}, family="tiny_cnn"),
        job("mlp_b", arrival=2, seed=3, target={"loss": 0.01}, deadline={"steps": 6}),
    ]


def test_three_user_jobs_end_to_end(tmp_path):
    res = schedule(
        three_jobs(),
        [
            f"paths.output_dir={tmp_path}",
            "jobs_methods=[EDF]",
            "sim.nodes=2",
            "sim.max_active=3",
            "sim.steps=4",
            "sim.obs_every=2",
            "live.progress_every=1000",
        ],
    )
    outcomes = json.loads((tmp_path / "job_outcomes.json").read_text())["EDF"]
    assert [o["name"] for o in outcomes] == ["mlp_a", "cnn", "mlp_b"]  # arrival order
    assert outcomes[0]["status"] == "succeeded" and outcomes[0]["final_mean_loss"] <= 1.9
    assert outcomes[2]["status"] == "failed"  # ε = 0.01 is out of reach within 6 steps
    assert all(o["batches"] > 0 and o["worker_failure"] is None for o in outcomes)
    rp = res["summary"]["EDF"]["replay"]
    assert rp["decisions_identical"] and rp["outcomes_identical"]
    bank = load_bank(tmp_path / "job_curves.parquet")
    assert len(bank) == 3 and set(bank.families) == {"custom", "tiny_cnn"}
    assert (tmp_path / "live_timeline.png").exists() and list((tmp_path / "tensorboard").iterdir())


def test_live_preemptions_and_moves_keep_every_loss_exact(tmp_path):
    """Three user jobs on 2 nodes with a switch cost (a job landing on another node reloads from its serialised state
    in its worker): every job's recorded losses equal an uninterrupted run of the same job, batch for batch."""
    jobs = three_jobs()
    res = schedule(
        jobs,
        [
            f"paths.output_dir={tmp_path}",
            "jobs_methods=[EDF]",
            "sim.nodes=2",
            "sim.max_active=3",
            "sim.steps=4",
            "sim.obs_every=2",
            "sim.switch_cost=1",
            "live.progress_every=1000",
            "live.figure=false",
            "live.tensorboard=false",
            "live.replay=false",
        ],
    )
    run = res["runs"][0]
    assert run["reloads"] > 0 and run["switches"] > 0  # jobs really moved between nodes
    parsed = parse_jobs(jobs)
    for j, name in enumerate(o["name"] for o in res["outcomes"]["EDF"]):
        i = next(k for k, p in enumerate(parsed) if p.name == name)
        spec = check_job(i, parsed[i], "jobs")
        ref = TrainingJob(spec)
        assert run["losses"][j] == [ref.step() for _ in run["losses"][j]], name


def test_crashing_user_job_fails_alone(tmp_path):
    res = schedule(
        three_jobs()[:2] + [job("mlp_c", seed=9, target={"loss": 1.9}, deadline={"steps": 40})],
        [
            f"paths.output_dir={tmp_path}",
            "jobs_methods=[FIFO]",
            "sim.nodes=2",
            "sim.max_active=3",
            "sim.steps=4",
            "sim.obs_every=2",
            "live.progress_every=1000",
            "++live.crash={0: 3}",
            "live.replay=false",
        ],
    )
    outcomes = res["outcomes"]["FIFO"]
    assert outcomes[0]["status"] == "failed" and "worker process of job 0" in outcomes[0]["worker_failure"]
    assert outcomes[0]["batches"] == 2  # the two batches before the crash are kept
    assert all(o["worker_failure"] is None and o["batches"] >= 20 for o in outcomes[1:])  # the others train on
    assert outcomes[2]["status"] == "succeeded"


def test_bank_rows_for_predictor_training():
    from mara.live.jobs import bank_records

    tasks = [
        {
            "name": f"j{i}",
            "family": "custom",
            "batch_size": 8,
            "lr": 1e-3,
            "arrival": 0,
            "budget": 90,
            "eps": 1.0,
            "cap": 90,
        }
        for i in range(6)
    ]
    runs = [{"method": "EDF", "losses": [[1.0] * n for n in (90, 80, 79, 85, 100, 0)]}]
    assert [r["split"] for r in bank_records(tasks, runs)] == ["pool"] * 5
    rows = bank_records(tasks, runs, "fm", obs_every=10)  # 79 batches: under 8 observations, left out
    assert [(r["meta"]["job"], r["split"]) for r in rows] == [
        ("j0", "fm_train"),
        ("j1", "fm_train"),
        ("j3", "fm_train"),
        ("j4", "fm_val"),
    ]


def test_job_raising_mid_run_fails_alone(tmp_path, bad_module):
    """A module whose training_step raises at its 5th batch: that job fails with the error, the others run on."""
    jobs = [
        job("boom", module={"_target_": "badjobs.Explodes"}, deadline={"steps": 30}),
        job("fine", seed=4, deadline={"steps": 30}),
    ]
    res = schedule(
        jobs,
        [
            f"paths.output_dir={tmp_path}",
            "jobs_methods=[FIFO]",
            "sim.nodes=2",
            "sim.max_active=2",
            "sim.steps=4",
            "live.progress_every=1000",
            "live.figure=false",
            "live.tensorboard=false",
        ],
    )
    boom, fine = res["outcomes"]["FIFO"]
    assert boom["status"] == "failed" and boom["batches"] == 4 and "out of memory (simulated)" in boom["worker_failure"]
    assert fine["worker_failure"] is None and fine["batches"] > 4


def live_cli(tmp_path, jobs: list, out, capsys) -> tuple[int, list[str]]:
    """``python -m mara.live jobs=<file>`` in-process on ``jobs`` written to tmp_path/j.yaml -> (exit code, the
    non-empty stderr lines); the run must stop (SystemExit)."""
    from hydra import compose, initialize_config_dir

    from mara.core.config import CONF_DIR
    from mara.live.run import live_main

    (tmp_path / "j.yaml").write_text(json.dumps({"jobs": jobs}))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("live", overrides=[f"paths.output_dir={out}", f"jobs={tmp_path / 'j.yaml'}"])
    with pytest.raises(SystemExit) as exc:
        run_cli(live_main, cfg)
    return exc.value.code, [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]


def test_run_cli_turns_job_file_mistakes_into_exit_2(tmp_path, capsys):
    code, err = live_cli(tmp_path, [{k: v for k, v in job("nt").items() if k != "target"}], tmp_path, capsys)
    assert code == 2
    assert err == [f"error: jobs file {tmp_path / 'j.yaml'}: job 'nt': target: missing"]


def test_spec_round_trips_through_worker_state():
    spec = check_job(0, parse_jobs([job("mlp")])[0], "jobs")
    assert (
        isinstance(spec, UserJobSpec) and spec.batch_size == 16 and spec.lr == 0.003
    )  # the DataModule's and optimiser's
    job_ = TrainingJob(spec)
    job_.step()
    again = TrainingJob.from_bytes(job_.to_bytes())
    assert again.spec == spec and again.processed == 1
