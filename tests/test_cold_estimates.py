"""Cold estimates inside the simulator (a predictor's ``first_obs`` and the decision head's ``cold`` prior): off, the
observations are those of the plain predictor; on, a cold task of a family with training curves gets a finite band
inside [0, cap] from its first observation, one without stays cold; the bound at that timing is the true remaining
batches; the methods compose and run; a bad value stops the run with one line and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from mara.allocators.rules import EDF
from mara.allocators.slack import COLD, FINISHABLE, HOPELESS, slack_stage
from mara.core.config import ConfigError, check_predictor_allowed, load_method_cfg
from mara.curves.bank import default_bank_path, load_bank
from mara.eval.runner import evaluate_one
from mara.eval.settings import SimSettings
from mara.predictors.baselines.truth import true_remaining_batches
from mara.predictors.factory import predictor_config, predictor_from
from mara.sim.env import WARMUP_OBS, BatchedEnv
from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bank():
    return load_bank(default_bank_path())


def _episodes(bank, task_set, n=3):
    return generate_episodes(bank, bank.family_params, PAPER_TASK_SETS[task_set], 0.06, 1001, n)


def _trace(bank, ep, predictor):
    """Every step's observation under EDF (the allocator reads no estimate, so both runs take the same actions)."""
    env = BatchedEnv(ep, bank, predictor=predictor)
    obs, alloc, out = env.reset(), EDF(), []
    alloc.reset(ep.E)
    while not env.done.all():
        out.append((obs, env.slot_need.copy(), env.slot_s.copy(), env.slot_task.copy()))
        obs, _, _, _ = env.step(alloc.act(obs))
    return out


def _cfg(name, **changes):
    cfg = predictor_config(name)
    for k, v in changes.items():
        OmegaConf.update(cfg, k, v, force_add=True)
    return cfg


def test_off_the_observations_are_the_plain_predictors(bank):
    ep = _episodes(bank, "ID")
    plain = _trace(bank, ep, predictor_from("qr_q", bank.path))
    prior_unused = _trace(bank, ep, predictor_from(_cfg("qr_q_cold", first_obs=WARMUP_OBS), bank.path))
    assert len(plain) == len(prior_unused)
    for (a, *_), (b, *_) in zip(plain, prior_unused):
        for field in ("pred_remaining", "pred_remaining_lo", "pred_remaining_hi", "n_obs", "no_estimate"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
        assert not a.no_estimate.any()
        cold = a.present & (a.n_obs < WARMUP_OBS)
        np.testing.assert_array_equal(a.pred_remaining[cold], a.cap_remaining[cold])  # cold: the cap, as always


def test_on_cold_tasks_get_a_band_inside_zero_cap_from_the_first_observation(bank):
    pred = predictor_from("qr_q_cold", bank.path)
    assert pred.first_obs == 1
    seen = informative = 0
    for obs, *_ in _trace(bank, _episodes(bank, "ID"), pred):
        m = obs.present & (obs.n_obs >= 1) & (obs.n_obs < WARMUP_OBS)
        lo, med, hi, cap = (
            obs.pred_remaining_lo[m],
            obs.pred_remaining[m],
            obs.pred_remaining_hi[m],
            obs.cap_remaining[m],
        )
        assert np.isfinite(med).all() and not obs.no_estimate[m].any()  # every ID family has training curves
        assert (0 <= lo).all() and (lo <= med).all() and (med <= hi).all() and (hi <= cap).all()
        seen += m.sum()
        informative += (med < cap).sum()
        np.testing.assert_array_equal(
            obs.pred_remaining[obs.present & (obs.n_obs == 0)], obs.cap_remaining[obs.present & (obs.n_obs == 0)]
        )  # nothing observed: the cap
    assert seen > 100 and informative > seen // 2


def test_a_family_without_training_curves_stays_cold(bank):
    pred = predictor_from("qr_q_cold", bank.path)
    ep = _episodes(bank, "RL_OOD")
    known = set(pred.cold.curves)
    n_unknown = 0
    for obs, _, _, task in _trace(bank, ep, pred):
        fam = np.where(task >= 0, ep.family[np.arange(ep.E)[:, None], np.maximum(task, 0)], "")
        early = obs.present & (obs.n_obs >= 1) & (obs.n_obs < WARMUP_OBS)
        unknown = early & ~np.isin(fam, list(known))
        np.testing.assert_array_equal(obs.no_estimate, unknown)
        np.testing.assert_array_equal(obs.pred_remaining[unknown], obs.cap_remaining[unknown])
        n_unknown += unknown.sum()
    assert n_unknown > 0
    # and the rule puts such a task with the cold ones, whatever its warm_obs
    stage = slack_stage(
        np.ones((1, 3), bool),
        np.full((1, 3), 50),
        np.array([[1, 1, 1]]),
        np.array([[10.0, 50, 80]]),
        np.full((1, 3), 40.0),
        warm_obs=1,
        no_estimate=np.array([[False, True, False]]),
    )
    assert stage.tolist() == [[FINISHABLE, COLD, HOPELESS]]


def test_truth_cold_is_the_true_remaining_batches_from_the_first_observation(bank):
    pred = predictor_from("truth_cold", bank.path)
    assert pred.first_obs == 1
    checked = 0
    for obs, need, s, _ in _trace(bank, _episodes(bank, "ID"), pred):
        m = obs.present & (obs.n_obs >= 1)
        true = true_remaining_batches(need, s, obs.cap_remaining)
        np.testing.assert_array_equal(obs.pred_remaining[m], true[m])
        checked += m.sum()
    assert checked > 100


def test_the_methods_compose_and_run(bank):
    ep = _episodes(bank, "ID", n=2)
    sim = SimSettings()
    predictors = {name: predictor_config(name) for name in ("qr_q", "qr_q_cold", "truth", "truth_cold")}
    built = {}
    for name, base, pred in (
        ("Slack-QR-q-cold", "Slack-QR-q", "qr_q_cold"),
        ("Slack-Truth-cold", "Slack-Truth", "truth_cold"),
    ):
        cfg = load_method_cfg(name)
        assert cfg.predictor == pred and cfg.allocator.name == name and cfg.allocator.warm_obs < WARMUP_OBS

        def rest(c):
            return {k: v for k, v in OmegaConf.to_container(c.allocator).items() if k not in ("name", "warm_obs")}

        assert rest(cfg) == rest(load_method_cfg(base))  # only the timing differs from the base rule
        rows = evaluate_one(name, cfg, ep, bank, sim, predictors, built)
        assert len(rows) == ep.E and all(0 <= r["success_rate"] <= 1 for r in rows)
    learned = OmegaConf.create(
        {
            "name": "MARA",
            "kind": "policy",
            "predictor": "truth_cold",
            "ckpt_path": "x.ckpt",
            "allocator": {"_target_": "mara.mat.allocator.MATAllocator"},
        }
    )
    with pytest.raises(ConfigError, match="perfect-prediction bound"):
        check_predictor_allowed(learned)


@pytest.mark.parametrize("value", [0, 5, 1.5])
def test_first_obs_out_of_range_is_a_config_error(bank, value):
    with pytest.raises(ConfigError, match=r"first_obs must be an integer in \[1, 4\]"):
        predictor_from(_cfg("truth_cold", first_obs=value), bank.path)


@pytest.mark.parametrize(
    "arg,needle",
    [
        ("predictors.qr_q_cold.first_obs=0", "predictors.qr_q_cold.first_obs must be an integer in [1, 4]"),
        ("predictors.qr_q_cold.cold.k=0", "predictors.qr_q_cold.cold.k must be an integer >= 1"),
        ("++predictors.qr_q_cold.cold.band=[0,0.5,0.9]", "predictors.qr_q_cold.cold.band must be a number in [0, 1]"),
        ("++predictors.qr_q_cold.cold.band=[0.6,0.5,0.9]", "predictors.qr_q_cold.cold.band must be three levels"),
    ],
)
def test_bad_value_is_one_line_and_exit_2(arg, needle, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run(
        [sys.executable, "-m", "mara.evaluate", "methods=[Slack-QR-q-cold]", arg, f"hydra.run.dir={tmp_path / 'run'}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1 and needle in lines[0], p.stderr[-2000:]
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_policy_trained_without_cold_estimates_is_not_given_them():
    from mara.predictors.factory import trained_predictor_mismatch

    qr_q = predictor_config("qr_q")
    assert trained_predictor_mismatch(qr_q, "qr_q") is None
    assert "trained with predictor 'qr'" in trained_predictor_mismatch(qr_q, "qr_q_cold")  # same head, another timing
    assert trained_predictor_mismatch(predictor_config("qr_q_cold"), "qr_q_cold") is None
