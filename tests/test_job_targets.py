"""Validation-metric targets of job-file jobs: parsing, the dry check (one line, exit 2), success decided by the metric
(not the training loss the scheduler plans with), validation that leaves training untouched, exact under preemption and
moves, a module whose validation breaks mid-run failing alone, and the outcomes and curve rows written."""

import json
import textwrap

import numpy as np
import pytest

from mara.core.config import ConfigError
from mara.curves.bank import load_bank
from mara.live.job import TrainingJob
from mara.live.jobfile import parse_jobs
from mara.live.jobs import check_job
from mara.live.schedule import schedule
from mara.live.validation import validate

MLP = {"_target_": "examples.user_jobs.MLPClassifier", "hidden": 16, "lr": 0.003}
BLOBS = {"_target_": "examples.user_jobs.BlobData", "n": 256, "batch_size": 16, "n_val": 128}
ACC = {"metric": "val/acc", "mode": "max", "value": 0.5, "loss": 1.0}
RUN = [
    "sim.nodes=2",
    "sim.steps=4",
    "sim.obs_every=2",
    "live.progress_every=1000",
    "live.figure=false",
    "live.tensorboard=false",
]
FIFO = [*RUN, "jobs_methods=[FIFO]", "sim.max_active=2"]

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def job(name="a", **kw):
    return {"name": name, "module": MLP, "data": BLOBS, "target": ACC, "deadline": {"steps": 30}, **kw}


@pytest.fixture
def val_modules(tmp_path, monkeypatch):
    """Importable modules whose validation is wrong in one way each."""
    (tmp_path / "valjobs.py").write_text(
        textwrap.dedent("""
        import lightning as L
        import torch
        import torch.nn.functional as F
        from examples.user_jobs import BlobData, MLPClassifier

        class NoValidation(MLPClassifier):
            validation_step = L.LightningModule.validation_step

        class NoValData(BlobData):
            val_dataloader = L.LightningDataModule.val_dataloader

        class BreaksOnSecondBatch(MLPClassifier):
            def validation_step(self, batch, batch_idx):
                if batch_idx >= 1:
                    raise RuntimeError("validation exploded (simulated)")
                super().validation_step(batch, batch_idx)

        class Noisy(MLPClassifier):
            # dropout in training draws from torch's global generator; so does this validation_step
            def training_step(self, batch, batch_idx):
                x, y = batch
                return F.cross_entropy(self.net(F.dropout(x, 0.3, training=True)), y)

            def validation_step(self, batch, batch_idx):
                torch.rand(1000)
                super().validation_step(batch, batch_idx)
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return "valjobs"


def test_metric_target_parses():
    (j,) = parse_jobs([job("m", target={**ACC, "every": 5})])
    assert (j.eps, j.metric, j.val_every) == (1.0, {"name": "val/acc", "mode": "max", "value": 0.5}, 5)
    (j,) = parse_jobs([job("l", target={"loss": 0.7})])
    assert (j.eps, j.metric, j.val_every) == (0.7, None, None)


@pytest.mark.parametrize(
    "target, field",
    [
        ({**ACC, "mode": "up"}, "target.mode"),
        ({k: v for k, v in ACC.items() if k != "value"}, "target.value"),
        ({**ACC, "value": "high"}, "target.value"),
        ({k: v for k, v in ACC.items() if k != "loss"}, "target.loss"),
        ({**ACC, "metric": ""}, "target.metric"),
        ({**ACC, "every": 0}, "target.every"),
        ({**ACC, "patience": 3}, "target.patience"),
        ({"value": 0.9}, "target"),
    ],
)
def test_bad_metric_target_names_job_and_field(target, field):
    with pytest.raises(ConfigError) as err:
        parse_jobs([job("ok"), job("bad", target=target)])
    assert "job 'bad'" in str(err.value) and f": {field}:" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"module": {**MLP, "_target_": "valjobs.NoValidation"}}, "job 'bad': module.validation_step: missing"),
        ({"data": {**BLOBS, "_target_": "valjobs.NoValData"}}, "job 'bad': data.val_dataloader: cannot build it"),
        (
            {"target": {**ACC, "metric": "val/f1"}},
            "job 'bad': target.metric: validation_step does not log 'val/f1' as a number (logged: val/acc, val/loss;",
        ),
    ],
)
def test_dry_check_is_one_line(val_modules, change, expected):
    with pytest.raises(ConfigError) as err:
        check_job(0, parse_jobs([job("bad", **change)])[0], "jobs")
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_cli_metric_never_logged_exits_2_before_training(tmp_path, capsys):
    from tests.test_jobfile import live_cli

    code, err = live_cli(
        tmp_path,
        [job("fine", target={"loss": 1.0}), job("nf", target={**ACC, "metric": "acc"})],
        tmp_path / "out",
        capsys,
    )
    assert code == 2
    assert len(err) == 1 and "job 'nf': target.metric: validation_step does not log 'acc'" in err[0]
    assert not (tmp_path / "out" / "job_outcomes.json").exists()


def test_validate_reduces_like_lightning():
    """Known answers: a batch-size-weighted mean over uneven batches (default reduction), max, sum, a torchmetrics
    Metric computed over the pass."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from torchmetrics import MeanMetric

    class Logs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.running = MeanMetric()

        def on_validation_epoch_start(self):
            pass

        def on_validation_epoch_end(self):
            pass

        def validation_step(self, batch, i):
            (x,) = batch
            self.log("mean", x.mean())
            self.log("max", x.max(), reduce_fx="max")
            self.log_dict({"sum": x.sum()}, reduce_fx="sum")
            self.running.update(x)
            self.log("metric", self.running)

        def log_dict(self, d, **kw):  # as LightningModule.log_dict: one self.log call per item
            for k, v in d.items():
                self.log(name=k, value=v, **kw)

    x = torch.arange(5, dtype=torch.float64)  # batches [0, 1, 2], [3, 4]
    logs = Logs()
    for _ in range(2):  # a Metric is reset after each pass: the second pass gives the same values
        out = validate(logs, DataLoader(TensorDataset(x), batch_size=3), torch.device("cpu"))
        # mean: (3 * 1 + 2 * 3.5) / 5 = 2, the unweighted batch mean would be 2.25; the Metric's own mean: 2
        assert out == {"mean": pytest.approx(2.0), "max": 4.0, "sum": 10.0, "metric": pytest.approx(2.0)}
    assert not hasattr(logs, "log")  # the captured log is removed from the instance


def test_validation_leaves_training_untouched(val_modules):
    """A module with dropout in training and random draws in validation: with validation every 2 batches, its training
    losses equal those of the same job without validation (validation runs on a forked random generator)."""
    noisy = job("n", module={**MLP, "_target_": "valjobs.Noisy"}, target={**ACC, "every": 2})
    spec = check_job(0, parse_jobs([noisy])[0], "jobs")
    with_val = TrainingJob(spec)
    losses = [with_val.step() for _ in range(8)]
    assert [s for s, _ in with_val.take_metrics()] == [2, 4, 6, 8]
    plain = TrainingJob(type(spec)(**{**spec.to_dict(), "val_metric": "", "val_every": 0}))
    assert plain.validation is None and [plain.step() for _ in range(8)] == losses


def test_success_is_decided_by_the_metric(tmp_path):
    """'reach' gets a training-loss ε it never reaches but an accuracy it does: it succeeds at the validation that
    crossed. 'miss' reaches its ε at once but never an accuracy above 1: it fails at its deadline. The replay (from
    the recorded losses and validations) agrees; the curve rows stay training-loss curves; TensorBoard has the
    metric."""
    jobs = [
        job("reach", target={**ACC, "value": 0.3, "loss": 1e-4}),
        job("miss", seed=3, target={**ACC, "value": 1.01, "loss": 100.0}, deadline={"steps": 12}),
    ]
    res = schedule(jobs, [f"paths.output_dir={tmp_path}", *(o for o in FIFO if "tensorboard" not in o)])
    reach, miss = res["outcomes"]["FIFO"]
    m = reach["metric"]
    assert reach["status"] == "succeeded" and reach["final_mean_loss"] > 1e-4
    assert m["crossed_value"] >= 0.3 and m["crossed_at_batch"] % 2 == 0 and m["crossed_at_batch"] == reach["batches"]
    assert m["crossed_at_step"] == reach["finish_step"] and m["last_value"] == m["crossed_value"]
    assert miss["status"] == "failed" and miss["final_mean_loss"] < 100.0
    assert miss["metric"]["crossed_at_batch"] is None and miss["metric"]["validations"] == miss["batches"] // 2
    assert miss["metric"]["last_at_batch"] == 2 * (miss["batches"] // 2) and miss["metric"]["last_value"] < 1.01
    rp = res["summary"]["FIFO"]["replay"]
    assert rp["decisions_identical"] and rp["outcomes_identical"]
    bank = load_bank(tmp_path / "job_curves.parquet")
    run = res["runs"][0]
    for i, name in enumerate(("reach", "miss")):
        row = next(k for k in range(len(bank)) if bank.curve_id[k] == f"jobs/FIFO/{name}")
        assert np.allclose(bank.ell[row, : bank.lengths[row]], run["losses"][i])
    saved = json.loads((tmp_path / "job_outcomes.json").read_text())["FIFO"]
    assert saved[0]["metric"] == m
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tb = EventAccumulator(str(tmp_path / "tensorboard"))
    tb.Reload()
    assert [(e.step, e.value) for e in tb.Scalars("FIFO/reach/val/acc")] == [
        (b, pytest.approx(v)) for _, b, v in run["metrics"][0]
    ]


def test_metric_values_exact_across_live_moves(tmp_path):
    """Two metric jobs and a loss job on 2 nodes with a switch cost (jobs reload from their serialised state when they
    move): every recorded validation equals an uninterrupted run's at the same batch. 'c' arrives with the earliest
    deadline, so EDF preempts a metric job for it and resumes it later."""
    jobs = [
        job("a", target={**ACC, "value": 0.9, "every": 3}),
        job("b", seed=4, target={**ACC, "value": 0.9}),
        job("c", seed=7, target={"loss": 0.01}, arrival=2, deadline={"steps": 6}),
    ]
    res = schedule(
        jobs,
        [
            f"paths.output_dir={tmp_path}",
            *RUN,
            "jobs_methods=[EDF]",
            "sim.max_active=3",
            "sim.switch_cost=1",
            "live.replay=false",
        ],
    )
    run = res["runs"][0]
    assert run["reloads"] > 0
    parsed = parse_jobs(jobs)
    for j, name in enumerate(o["name"] for o in res["outcomes"]["EDF"][:2]):
        i = next(k for k, p in enumerate(parsed) if p.name == name)
        ref = TrainingJob(check_job(i, parsed[i], "jobs", obs_every=2))
        losses = [ref.step() for _ in run["losses"][j]]
        assert losses == run["losses"][j], name
        assert [[s, v] for s, v in ref.take_metrics()] == [h[1:] for h in run["metrics"][j]], name
        assert run["metrics"][j], name


def test_validation_breaking_mid_run_fails_alone(tmp_path, val_modules):
    """The dry check passes (one validation batch); the first full pass fails on the second batch: that job fails with
    the reason, the other trains on."""
    jobs = [
        job(
            "breaks",
            module={**MLP, "_target_": "valjobs.BreaksOnSecondBatch"},
            data={**BLOBS, "n_val": 300},
            target={**ACC, "value": 0.99},
        ),
        job("fine", seed=4, target={"loss": 0.01}),
    ]
    res = schedule(jobs, [f"paths.output_dir={tmp_path}", *FIFO])
    breaks, fine = res["outcomes"]["FIFO"]
    assert breaks["status"] == "failed" and "validation exploded (simulated)" in breaks["worker_failure"]
    assert fine["worker_failure"] is None and fine["batches"] > breaks["batches"]
