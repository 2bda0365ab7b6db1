"""MARA on job traces: the permutation-invariant scorer, the greedy allocator, the checkpoint, the training checks."""

import csv
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from mara.core.config import ConfigError
from mara.mat.trace_train import pl_nll, save_policy
from mara.traces.policy import F, PriorityNet, TraceMARA, allocate, job_features, load_policy, rule_scores
from mara.traces.replay import PENDING, JobState
from mara.traces.throughput import LEVELS
from mara.train_settings import trace_policy_settings

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "conf" / "experiment" / "trace_mara.yaml"


@pytest.fixture
def itp_like_traces(tmp_path, monkeypatch):
    """The recipe's trace files (relative paths) in a fresh folder made the working directory: the shipped sample's
    300 jobs, one every 0.2 days (60 days), each keeping its own deadline's distance, for every cluster named."""
    with open(ROOT / "mara" / "data" / "traces" / "itp_cluster01_first300.csv", newline="") as fh:
        rd = csv.DictReader(fh)
        rows, fields = list(rd), rd.fieldnames
    for i, r in enumerate(rows):
        slack = int(r["deadline"]) - int(r["submission_time"])
        r["submission_time"], r["deadline"] = str(i * 17280), str(i * 17280 + slack)
    folder = tmp_path / "data_cache" / "itp-traces" / "elasticflow"
    folder.mkdir(parents=True)
    for c in ("01", "02", "03", "04", "05", "07", "08", "09"):
        with open(folder / f"cluster{c}.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _state(n_gpus=8, iters=(100.0, 100.0), ddl=(1000, 1000)):
    """Jobs that scale perfectly (1 it/s per GPU) up to 8 GPUs."""
    J = len(iters)
    tput = np.zeros((J, len(LEVELS)))
    tput[:, :4] = LEVELS[:4]
    s = JobState(
        np.zeros(J, dtype=np.int64),
        np.asarray(ddl, dtype=np.int64),
        tput,
        np.full(J, 3),
        np.asarray(iters, dtype=np.float64),
        n_gpus,
    )
    s.status[:] = PENDING
    return s


def test_a_job_gets_its_minimum_share_first_and_the_rest_goes_by_speed_up():
    # job 0 needs 2 GPUs to finish 200 iterations in 100 s; job 1 needs 1; 8 GPUs: both get their share, the 5 left
    # grow the jobs one level at a time
    s = _state(iters=(200.0, 100.0), ddl=(100, 100))
    g = allocate(0, s, np.arange(2), np.array([2.0, 1.0]))
    assert g.tolist() == [4, 4]  # 2 + 1, then 1 -> 2 (doubles its speed), 2 -> 4 twice
    # 2 GPUs in all: the higher score gets its share, the other what fits; a deferred job (score < 0) only what is left
    s = _state(n_gpus=2, iters=(200.0, 100.0), ddl=(100, 100))
    assert allocate(0, s, np.arange(2), np.array([1.0, 2.0])).tolist() == [1, 1]
    assert allocate(0, s, np.arange(2), np.array([1.0, -1.0])).tolist() == [2, 0]


def test_the_scores_follow_the_jobs_whatever_their_order_and_number():
    torch.manual_seed(0)
    net = PriorityNet(8)
    for n in (1, 5, 40):
        x = torch.randn(n, F)
        perm = torch.randperm(n)
        assert torch.allclose(net(x)[perm], net(x[perm]), atol=1e-6)


def test_features_speak_in_shares_of_the_cluster_so_one_network_acts_at_every_size():
    small, big = _state(n_gpus=8), _state(n_gpus=64)
    x8 = job_features(0, small, np.arange(2), np.zeros(2))
    x64 = job_features(0, big, np.arange(2), np.zeros(2))
    assert x8.shape == (2, F) and np.isfinite(x8).all()
    names = ("need_share", "max_share", "queue")
    from mara.traces.policy import FEATURES

    for k in names:
        i = FEATURES.index(k)
        assert np.allclose(x8[:, i], 8 * x64[:, i])


def test_a_trace_policy_checkpoint_loads_as_data_and_scores_alike(tmp_path):
    net = PriorityNet(8)
    save_policy(net, tmp_path / "p.ckpt", {"stage": "imitation"})
    back = load_policy(tmp_path / "p.ckpt")  # weights_only=True inside
    x = torch.randn(6, F)
    assert torch.allclose(net(x), back(x))
    with pytest.raises(ConfigError, match="not found"):
        TraceMARA(ckpt_path=tmp_path / "missing.ckpt")


def test_the_plackett_luce_likelihood_prefers_the_order_of_the_scores():
    s = torch.tensor([3.0, 1.0, 2.0])
    assert pl_nll(s, np.array([0, 2, 1]), 3) < pl_nll(s, np.array([1, 2, 0]), 3)


def test_edf_rule_scores_put_the_earliest_deadline_first_and_defer_nothing():
    x = np.zeros((3, F))
    sc = rule_scores("edf", x, np.array([30, 10, 20]))
    assert np.argsort(-sc).tolist() == [1, 2, 0] and (sc > 0).all()
    x[:, 3] = [1, 0, 1]  # job 1 cannot make its deadline
    assert (rule_scores("edf_feasible", x, np.array([30, 10, 20])) < 0).tolist() == [False, True, False]


def test_training_settings_are_checked_before_any_work(tmp_path):
    base = OmegaConf.load(RECIPE)
    cfg = OmegaConf.merge(base, {"trace_mara": {"band": "middle"}})
    with pytest.raises(ConfigError, match="band"):
        trace_policy_settings(cfg)
    cfg = OmegaConf.merge(base, {"trace_mara": {"pg_rounds": -1}})
    with pytest.raises(ConfigError, match="pg_rounds"):
        trace_policy_settings(cfg)
    cfg = OmegaConf.merge(
        base,
        {
            "trace_mara": {
                "train": [{"path": str(tmp_path / "no.csv"), "cluster": "n8g8", "start_day": 0, "days": 1, "count": 1}]
            }
        },
    )
    with pytest.raises(ConfigError, match="not found"):
        trace_policy_settings(cfg)


def test_the_training_settings_parse_into_frozen_settings_whose_defaults_fill_what_is_left_out(itp_like_traces):
    import dataclasses

    from mara.mat.trace_settings import WARMUP_DAYS, TracePolicySettings

    base = OmegaConf.load(RECIPE)
    settings = trace_policy_settings(OmegaConf.merge(base, {"seed": 3}))
    assert isinstance(settings, TracePolicySettings) and settings.seed == 3
    assert (len(settings.train), len(settings.val)) == (7, 3) and settings.val[0].split == "val"
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.lr = 1.0
    block = OmegaConf.to_container(base.trace_mara)
    for k in ("lr", "keep", "threads"):
        block.pop(k)
    for w in block["val"]:
        w.pop("warmup_days")
    lean = trace_policy_settings(OmegaConf.create({"trace_mara": block}))
    defaults = {f.name: f.default for f in dataclasses.fields(TracePolicySettings)}
    assert (lean.lr, lean.keep, lean.threads) == (defaults["lr"], defaults["keep"], defaults["threads"])
    assert lean.val[0].warmup_days == WARMUP_DAYS["val"]


@pytest.mark.parametrize(
    "change, words",
    [
        ({"lr": "fast"}, "trace_mara.lr must be a number"),
        ({"keep": 0}, "trace_mara.keep must be an integer >= 1"),
        ({"declare_quantile": 1.5}, "trace_mara.declare_quantile must be in [0, 1]"),
        ({"learning_rate": 0.1}, "trace_mara: unknown setting learning_rate"),
    ],
)
def test_every_training_setting_is_checked_in_one_line(change, words):
    cfg = OmegaConf.merge(OmegaConf.load(RECIPE), {"trace_mara": change})
    with pytest.raises(ConfigError, match=re.escape(words)) as err:
        trace_policy_settings(cfg)
    assert "\n" not in str(err.value)


def test_a_window_spec_is_checked_in_one_line(itp_like_traces):
    base = OmegaConf.load(RECIPE)
    spec = OmegaConf.to_container(base.trace_mara.train[0])
    for change, words in (
        ({"count": None}, "each entry needs count"),
        ({"split": "test"}, "split must be one of train, val"),
        ({"weeks": 1}, "unknown setting weeks"),
        ({"start_day": 10_000}, "no window of 1 days fits"),
    ):
        bad = {k: v for k, v in {**spec, **change}.items() if v is not None}
        with pytest.raises(ConfigError, match=words):
            trace_policy_settings(OmegaConf.merge(base, {"trace_mara": {"train": [bad]}}))


def test_the_entry_point_parses_the_trace_experiment_into_its_settings_alone(itp_like_traces):
    out = itp_like_traces / "run"
    from mara.train import before_any_work
    from tests.test_entrypoints import cfg_for

    settings = before_any_work(cfg_for("train", ["experiment=trace_mara", f"paths.output_dir={out}"]))
    assert settings.trace_policy is not None and settings.folder == str(out)
    assert settings.policy is None and settings.paper is None and settings.records == {}


def test_a_missing_trace_policy_checkpoint_is_refused_before_any_work():
    from mara.preflight.traces import check_trace_run
    from mara.traces.settings import trace_run_settings

    cfg = {
        "methods": ["MARA"],
        "trace": {"jobs": "target_loss"},
        "method_overrides": {"MARA": {"trace_scheduler": {"ckpt_path": "/no/such.ckpt"}}},
    }
    with pytest.raises(ConfigError, match="not found"):
        check_trace_run(trace_run_settings(cfg))


def test_the_shipped_policy_meets_more_deadlines_than_elasticflow_on_declared_counts_on_the_sample():
    from mara.core.registry import method
    from mara.curves.bank import default_bank_path, load_bank
    from mara.predictors.factory import predictor_from
    from mara.traces.schema import load_trace, make_windows
    from mara.traces.settings import trace_settings
    from mara.traces.target_run import replay_target_window
    from mara.traces.throughput import known_models

    ts = trace_settings({"first_jobs": 60, "jobs": "target_loss"})
    tr = load_trace(ts.path, ts.cluster, 1.5, known_models())
    w = make_windows(tr, None, 0, 1, 0, ts.first_jobs)[0]
    bank = load_bank(default_bank_path())
    met = {}
    for m in ("MARA", "ElasticFlow"):
        keys = method(m).trace
        pred = predictor_from(keys.predictor, bank.path) if keys.count == "predicted" else None
        _, scored, rep, _, _ = replay_target_window(tr, w, ts, keys, bank, pred)
        met[m] = rep.met[scored].mean()
    assert met["MARA"] > met["ElasticFlow"], met


def test_a_wide_job_passed_over_starves_without_a_reservation_and_meets_its_deadline_with_one():
    from mara.traces.replay import replay

    # 8 GPUs, deadline order: job 0 needs 4 GPUs until t=100; job 1 (wide) needs all 8 to finish 1,600 iterations
    # by t=250, so its share does not fit at t=0; job 2 (narrow, late deadline) fits behind it. Without a
    # reservation job 2 takes GPUs now, job 1 gets only 2, and from t=100 even 8 GPUs are too late. With one, job 1
    # reserves the 8 GPUs that are free at t=100 (job 0's finish), job 2 may not hold GPUs past that time, job 1
    # runs on the 4 spare until then and meets its deadline; job 2 still meets its own.
    met = {}
    for reserve in (0, 1):
        s = _state(iters=(400.0, 1600.0, 1000.0), ddl=(100, 250, 2000))
        s.status[:] = 0
        sched = TraceMARA(rule="edf", overhead=False, reserve=reserve, probe=0)
        rep = replay(s, sched, np.zeros(3, dtype=np.int64), 1)
        met[reserve] = rep.met.tolist()
    assert met[0] == [True, False, True]
    assert met[1] == [True, True, True]
    s = _state(iters=(400.0, 1600.0, 1000.0), ddl=(100, 250, 2000))
    assert allocate(0, s, np.arange(3), np.array([3.0, 2.0, 1.0])).tolist() == [4, 2, 2]
    assert allocate(0, s, np.arange(3), np.array([3.0, 2.0, 1.0]), reserve=1).tolist() == [4, 4, 0]


def test_a_bad_reservation_setting_is_refused_before_any_work():
    from mara.preflight.traces import check_trace_run
    from mara.traces.settings import trace_run_settings

    cfg = {
        "methods": ["MARA"],
        "trace": {"jobs": "target_loss"},
        "method_overrides": {"MARA": {"trace_scheduler": {"reserve": -1}}},
    }
    with pytest.raises(ConfigError, match="reserve"):
        check_trace_run(trace_run_settings(cfg))


def test_a_job_hopeless_by_its_estimate_gets_one_gpu_to_probe_so_the_estimate_can_change():
    # job 0 can finish by its deadline only on 8 GPUs; job 1 (first in score order) cannot by its estimate on any
    # level. Without probes job 1 gets nothing, shows no new loss, and its estimate never moves; with one probe it
    # gets one GPU at its place in score order. A deferred job, or one past its deadline, is never probed.
    s = _state(iters=(800.0, 10000.0), ddl=(100, 200))
    sc = np.array([1.0, 2.0])
    assert allocate(0, s, np.arange(2), sc).tolist() == [8, 0]
    assert allocate(0, s, np.arange(2), sc, probe=1).tolist() == [4, 4]  # 1 GPU probe, then job 0 what fits (4),
    # then the 3 left by speed-up: the probe 1 -> 2 -> 4
    assert allocate(0, s, np.arange(2), np.array([1.0, -1.0]), probe=1).tolist() == [8, 0]
    assert allocate(300, s, np.arange(2), sc, probe=1).tolist() == allocate(300, s, np.arange(2), sc).tolist()
    with pytest.raises(ConfigError, match="probe"):
        TraceMARA(rule="edf", probe=-1)


def test_an_estimated_count_view_replays_afresh_under_each_scheduler():
    from mara.traces.target_run import PredictedCount

    # an episode is replayed under many schedulers: the view's memory of when it last asked its predictor, and of
    # each job's last estimate, must not carry over from one replay into the next
    view = PredictedCount(TraceMARA(rule="edf"), None, None, None, 1, np.array([100.0, 100.0]), every_s=0.0)
    view.asked_at, view.last = 10**9, {0: (5, 1.0)}
    view.start(_state())
    assert view.asked_at == -np.inf and view.last == {}
