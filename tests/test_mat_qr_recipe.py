"""MAT trained on the decision head (`mat=default predictor=qr_q`): the recipe, the tokens at the head's
level (`mat.net.token_q` / `token_band`), the policy / checkpoint carrying them, no FM sample cache for the head."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mara.mat.features import (
    BAND_LEVELS,
    BAND_Q,
    n_features,
    obs_to_tokens,
    token_options,
)
from mara.mat.nets import MATPolicy
from tests.test_mat_band_features import hand_obs

torch.set_num_threads(1)


def _compose(*overrides):
    from hydra import compose, initialize_config_dir

    from mara.core.config import CONF_DIR

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose("train", overrides=list(overrides))


def test_qr_recipe_is_band_with_the_head_and_its_rule():
    from mara.core.config import build_allocators, load_method_cfg
    from mara.predictors.factory import predictor_config
    from mara.train_settings import mat_settings

    qr = mat_settings(_compose("mat=default")).recorded()  # the `default` recipe (MARA-QR) on the default qr_q
    band = mat_settings(_compose("experiment=band")).recorded()
    assert qr["predictor"]["name"] == "qr" and list(qr["predictor"]["band"]) == [0.05, 0.5, 0.9]
    assert qr["imitation"]["teacher"] == "Slack-QR-q"
    teacher = build_allocators(load_method_cfg("Slack-QR-q"))[0][1]
    method = load_method_cfg("Slack-QR-q")
    head_band = list(predictor_config(method.predictor).band)
    # the tokens judge the stage where the teacher does, on the band the head carries
    assert qr["net"]["token_q"] == teacher.quantile == head_band[0]
    assert list(qr["net"]["token_band"]) == list(method.allocator.band) == [head_band[0], head_band[2]]
    # everything else is the mat=band recipe
    strip = lambda c: {k: v for k, v in c.items() if k not in ("predictor", "imitation", "net")}  # noqa: E731
    assert strip(qr) == strip(band)
    assert {k: v for k, v in qr["net"].items() if not k.startswith("token_")} == band["net"]
    assert {k: v for k, v in qr["imitation"].items() if k != "teacher"} == {
        k: v for k, v in band["imitation"].items() if k != "teacher"
    }
    # the FM recipes record no token options: their checkpoints and tokens are unchanged
    assert "token_q" not in band["net"] and "token_q" not in mat_settings(_compose("mat=clone", "predictor=fm")).net


def test_tokens_at_the_head_level_by_hand():
    """Slot 0: median 100, band lower end 85, τ = 80. Read as the FM's q10 (default options) its 0.01 quantile is
    ≈ 74 (finishable, Slack-FM-q's stage); read as the head's 0.05 level with token_q = 0.05 it is 85 itself
    (hopeless, Slack-QR-q's stage). Slot 1 finishable either way, slot 2 cold."""
    from mara.allocators.slack import band_quantile
    from mara.core.config import build_allocators, load_method_cfg

    o = hand_obs(lo=(85.0, 20.0, 40.0))
    tau, s1 = 80.0, n_features("v1")[0]
    head, _ = obs_to_tokens(o, 350.0, "v2", q=0.05, band=(0.05, 0.9))
    fm, _ = obs_to_tokens(o, 350.0, "v2")
    assert torch.equal(fm, obs_to_tokens(o, 350.0, "v2", q=BAND_Q, band=BAND_LEVELS)[0])
    x, y = head[0].double().numpy(), fm[0].double().numpy()
    np.testing.assert_allclose(x[0, s1 + 2], (tau - 85.0) / 350, atol=1e-6)  # the head's level, read directly
    q_fm = band_quantile(85.0, 100.0, 150.0, BAND_Q)
    assert q_fm < tau
    np.testing.assert_allclose(y[0, s1 + 2], (tau - q_fm) / 350, atol=1e-6)
    np.testing.assert_array_equal(x[0, s1 + 3 : s1 + 6], [0, 0, 1])  # hopeless at the head's 0.05 level
    np.testing.assert_array_equal(y[0, s1 + 3 : s1 + 6], [1, 0, 0])  # finishable at the FM band's extrapolated 0.01
    np.testing.assert_array_equal(x[1, s1 + 3 : s1 + 6], [1, 0, 0])
    np.testing.assert_array_equal(x[2, s1 + 3 : s1 + 6], [0, 1, 0])
    # every other column is the same (the band ends, width, counts; v1 part; globals)
    other = [i for i in range(x.shape[1]) if i not in (s1 + 2, s1 + 3, s1 + 4, s1 + 5)]
    np.testing.assert_array_equal(x[:, other], y[:, other])
    # the teachers act on those stages: Slack-QR-q serves {1, 2} (slot 0 hopeless), Slack-FM-q {0, 1}
    qr_rule = build_allocators(load_method_cfg("Slack-QR-q"))[0][1]
    fm_rule = build_allocators(load_method_cfg("Slack-FM-q"))[0][1]
    assert set(qr_rule.act(o)[0].tolist()) == {1, 2} and set(fm_rule.act(o)[0].tolist()) == {0, 1}


def test_policy_carries_its_token_options():
    p = MATPolicy(
        n_slots=4,
        n_nodes=2,
        d_model=8,
        d_ff=16,
        decoder="plackett_luce",
        features="v2",
        token_q=0.05,
        token_band=[0.05, 0.9],
    )
    assert token_options(p) == {"q": 0.05, "band": (0.05, 0.9)}
    old = MATPolicy(n_slots=4, n_nodes=2, d_model=8, d_ff=16, features="v2")  # hparams without token options
    assert token_options(old) == {"q": BAND_Q, "band": BAND_LEVELS}
    assert token_options(object()) == {"q": BAND_Q, "band": BAND_LEVELS}
    for bad in ({"token_q": 1.0}, {"token_band": [0.5, 0.9]}, {"token_band": [0.1]}):
        with pytest.raises(ValueError, match="mat.net.token"):
            MATPolicy(n_slots=4, n_nodes=2, d_model=8, d_ff=16, **bad)


def test_tiny_training_on_the_head(tmp_path):
    """`predictor=qr_q` + Slack-QR-q teacher end to end (tiny): imitation runs, no FM sample cache is built for the
    head although rollout.fm_cache is on, the checkpoint records the token options and loads as an allocator that
    builds its tokens with them."""
    import lightning as L

    from mara.mat.allocator import MATAllocator
    from mara.mat.train import train_policy
    from mara.predictors.qr.head import QuantileHeadPredictor
    from mara.train_settings import load_recipe, mat_settings

    cfg = load_recipe("default")
    cfg.merge_with_dotlist(
        [
            f"output_dir={tmp_path / 'run'}",
            "predictor=qr_q",
            "total_env_steps=256",
            "rollout.fm_cache=true",
            "sim.n_nodes=3",
            "sim.max_active=5",
            "sim.n_steps=100",
            "workload.load=0.06",
            "rollout.n_episodes=8",
            "rollout.n_steps=16",
            "rollout.n_groups=4",
            "rollout.stagger=25",
            "ppo.n_minibatches=2",
            "validation.roots=[1000]",
            "validation.n_episodes=2",
            "validation.every_n_iterations=100",
            "validation.baselines=false",
            "net.d_model=16",
            "net.d_ff=32",
            "net.token_q=0.05",
            "net.token_band=[0.05,0.9]",
            "imitation.teacher=Slack-QR-q",
            "imitation.n_episodes=8",
            "imitation.n_steps=40",
            "imitation.stagger=10",
            "imitation.dagger_rounds=0",
            "imitation.epochs=1",
            "ppo.value_warmup_iterations=0",
        ]
    )
    seen = {}

    class Spy(L.Callback):
        def on_train_start(self, trainer, pl_module):
            seen.update(cache=pl_module.fm_cache, predictor=pl_module.env.predictor, report=pl_module.imitation_report)

    r = train_policy(mat_settings(cfg), callbacks=[Spy()])
    assert seen["cache"] is None and isinstance(seen["predictor"], QuantileHeadPredictor)
    assert seen["predictor"].quantiles[0] == 0.05 and seen["report"]["rounds"][0]["states"] > 0
    alloc = MATAllocator(r["best_ckpt"])
    assert (
        token_options(alloc.policy) == {"q": 0.05, "band": (0.05, 0.9)} and alloc.predictor_name == "qr_q"
    )  # the bare spec
