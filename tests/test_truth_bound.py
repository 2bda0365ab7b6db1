"""The perfect-prediction bound (predictor truth, Slack-Truth) and the band-aware rule (Slack-FM-q)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from mara.allocators.slack import SlackRule, band_quantile
from mara.core.config import ConfigError, check_predictor_allowed, load_method_cfg
from mara.curves.bank import NEVER
from mara.predictors.baselines.truth import TruthPredictor, true_remaining_batches
from mara.sim.env import WARMUP_OBS, BatchedEnv


def test_true_remaining_hand_cases():
    # need 100, processed 40 -> 60; already past the crossing -> 0; never crosses -> cap_remaining + 1;
    # crossing beyond the cap (need 300, processed 40, 200 left to the cap) -> 201
    got = true_remaining_batches([100, 30, NEVER, 300], [40, 40, 40, 40], [500, 500, 150, 200])
    assert got.tolist() == [60.0, 0.0, 151.0, 201.0]
    with pytest.raises(TypeError, match="only the simulator"):
        TruthPredictor().predict_remaining(None, None, None, None, None, None, None)


class NeedMinusProcessed:
    """The least-slack rule fed need − processed directly from the simulator (warm tasks; the cap while cold)."""

    name = "slack-fed-truth"

    def __init__(self, env):
        self.env, self.rule = env, SlackRule()

    def reset(self, n):
        pass

    def act(self, obs):
        env = self.env
        left = (env.slot_need - env.slot_s).astype(np.float64)
        fed = np.where(obs.n_obs >= WARMUP_OBS, left, obs.cap_remaining)
        shown = SimpleNamespace(
            present=obs.present,
            task=obs.task,
            remaining_time=obs.remaining_time,
            deadline=obs.deadline,
            n_obs=obs.n_obs,
            cap_remaining=obs.cap_remaining,
            pred_remaining=np.where(obs.present, fed, 0.0),
            n_nodes=obs.n_nodes,
        )
        return self.rule.act(shown)


def test_slack_truth_equals_least_slack_fed_need_minus_processed(small_bank):
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    eps = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["ID"], 0.06, 1001, 6)
    a = BatchedEnv(eps, small_bank, predictor=TruthPredictor())
    b = BatchedEnv(eps, small_bank, predictor=None)
    truth_rule, fed = SlackRule(name="Slack-Truth"), NeedMinusProcessed(b)
    oa, ob = a.reset(), b.reset()
    steps = warm_served = 0
    while not a.done.all():
        xa, xb = truth_rule.act(oa), fed.act(ob)
        np.testing.assert_array_equal(xa, xb)
        warm_served += int(((oa.n_obs >= WARMUP_OBS) & oa.present).sum())
        oa, ob = a.step(xa)[0], b.step(xb)[0]
        steps += 1
    assert steps > 50 and warm_served > 0
    np.testing.assert_array_equal(a.metrics()["succeeded"], b.metrics()["succeeded"])


def test_truth_band_is_degenerate_and_exact_once_warm(small_bank):
    from mara.allocators.rules import EDF
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    eps = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["ID"], 0.05, 1002, 3)
    env = BatchedEnv(eps, small_bank, predictor=TruthPredictor())
    obs, alloc, checked = env.reset(), EDF(), 0
    while not env.done.all():
        warm = obs.present & (obs.n_obs >= WARMUP_OBS)
        exact = true_remaining_batches(env.slot_need, env.slot_s, obs.cap_remaining)
        np.testing.assert_allclose(obs.pred_remaining[warm], exact[warm])
        np.testing.assert_allclose(obs.pred_remaining_lo[warm], exact[warm])
        np.testing.assert_allclose(obs.pred_remaining_hi[warm], exact[warm])
        cold = obs.present & ~(obs.n_obs >= WARMUP_OBS)
        np.testing.assert_allclose(obs.pred_remaining[cold], obs.cap_remaining[cold])  # same timing: cold = cap
        checked += int(warm.sum())
        obs = env.step(alloc.act(obs))[0]
    assert checked > 0


def test_truth_refused_in_live_mode(small_bank):
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    eps = generate_episodes(small_bank, small_bank.family_params, PAPER_TASK_SETS["ID"], 0.05, 1002, 1)
    with pytest.raises(ValueError, match="live mode"):
        BatchedEnv(eps, small_bank, predictor=TruthPredictor(), curve_source=object())


def test_learned_policy_refused_the_truth_predictor():
    check_predictor_allowed(load_method_cfg("Slack-Truth"))  # a rule may read it
    for name in ("MARA", "MARA-WLS"):
        with pytest.raises(ConfigError, match="refused to learned policies"):
            check_predictor_allowed(load_method_cfg(name, {"predictor": "truth"}))
    assert load_method_cfg("Slack-Truth").predictor == "truth"


def test_cli_refuses_mara_with_truth(tmp_path):
    from tests.test_entrypoints import _run

    p = _run(
        "-m",
        "mara.evaluate",
        "methods=[MARA]",
        "++method_overrides={MARA: {predictor: truth}}",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "refused to learned policies" in lines[0] and "Traceback" not in p.stderr


# ------------------------------------------------------------------------------------------ band quantile
def test_band_quantile_hand_cases():
    lo, med, hi = np.expm1(1.0), np.expm1(3.0), np.expm1(4.0)  # log1p: 1, 3, 4
    assert band_quantile(lo, med, hi, 0.1) == pytest.approx(lo)
    assert band_quantile(lo, med, hi, 0.5) == pytest.approx(med)
    assert band_quantile(lo, med, hi, 0.9) == pytest.approx(hi)
    # q = 0.3: z(0.3) / z(0.1) = 0.5244005 / 1.2815516 = 0.4091919 of the way from the median (3) toward lo (1)
    assert band_quantile(lo, med, hi, 0.3) == pytest.approx(np.expm1(3.0 - 2 * 0.4091919), rel=1e-6)
    # q = 0.7 on the upper side: 0.4091919 of the way toward hi (4)
    assert band_quantile(lo, med, hi, 0.7) == pytest.approx(np.expm1(3.0 + 0.4091919), rel=1e-6)
    # q = 0.05 extrapolates below lo: z(0.05) / z(0.1) = 1.6448536 / 1.2815516 = 1.2834860
    assert band_quantile(lo, med, hi, 0.05) == pytest.approx(np.expm1(max(3.0 - 2 * 1.2834860, 0.0)), rel=1e-6)
    assert band_quantile(0.0, 0.0, 0.0, 0.2) == 0.0  # degenerate band stays put
    with pytest.raises(ValueError):
        band_quantile(lo, med, hi, 1.0)


def _obs(pred, lo, hi, tau, n_obs, M):
    K = len(pred)
    present = np.ones((1, K), bool)
    return SimpleNamespace(
        present=present,
        task=np.arange(K)[None],
        remaining_time=np.array([tau]),
        deadline=np.array([tau]) + 3,
        n_obs=np.array([n_obs]),
        cap_remaining=np.full((1, K), 999),
        pred_remaining=np.array([pred], float),
        pred_remaining_lo=np.array([lo], float),
        pred_remaining_hi=np.array([hi], float),
        n_nodes=M,
        max_active=K,
    )


def test_quantile_rule_changes_feasibility_and_order():
    # slot 0: median 50 > tau 40 (hopeless by the median) but q10 = 20 (finishable at q10)
    # slot 1: median 30, q10 25, tau 40 (finishable either way); slot 2: cold (deadline 13) ; slot 3: median 99, q10 80
    obs = _obs(
        pred=[50, 30, 999, 99],
        lo=[20, 25, 999, 80],
        hi=[90, 60, 999, 200],
        tau=[40, 40, 10, 40],
        n_obs=[5, 5, 2, 5],
        M=2,
    )
    assert list(SlackRule().act(obs)[0]) == [1, 2]  # median: slot 1 (slack 10), then the cold slot 2
    # q10, order by the median slack: slot 0 (slack 40 − 50 = −10) before slot 1 (10)
    assert list(SlackRule(quantile=0.1).act(obs)[0]) == [0, 1]
    # q10, order by the q10 slack: slot 1 (40 − 25 = 15) before slot 0 (40 − 20 = 20)
    assert list(SlackRule(quantile=0.1, slack_at="quantile").act(obs)[0]) == [1, 0]
    obs.n_nodes = 4  # hopeless slot 3 last in every reading
    assert SlackRule(quantile=0.1).act(obs)[0][-1] == 3
    with pytest.raises(ValueError):
        SlackRule(quantile=0.0)
    with pytest.raises(ValueError):
        SlackRule(slack_at="mean")


def test_slack_fm_q_config_reads_a_band():
    from hydra.utils import instantiate

    cfg = load_method_cfg("Slack-FM-q")
    alloc = instantiate(cfg.allocator)
    assert (
        cfg.predictor == "fm"
        and isinstance(alloc, SlackRule)
        and alloc.quantile is not None
        and 0 < alloc.quantile < 0.5
    )
