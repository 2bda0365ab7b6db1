"""The v2 MAT tokens (band slacks, Slack-FM-q stage, observation count), the feature set in the
policy / checkpoint, the imitation teacher from config, mixed-load episode batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mara.allocators.slack import band_quantile
from mara.mat.features import BAND_Q, n_features, obs_to_tokens
from mara.mat.nets import MATPolicy
from mara.mat.rollout import batch_load
from mara.sim.env import Observation


def hand_obs(pred=(100.0, 100.0, 50.0), lo=(95.0, 20.0, 40.0), hi=(150.0, 140.0, 60.0), s=(40, 40, 10)):
    """One episode, K = 4 slots (slot 3 empty); every input an Observation carries, and nothing else.
    obs_every 10: slots 0, 1 have 4 observations (warm), slot 2 has 1 (cold). Deadlines 150 at t = 70: τ = 80.
    Estimates made at the current s (no ageing)."""
    E, K = 1, 4
    task = np.array([[0, 1, 2, -1]])
    s_ = np.array([[*s, 0]])
    f = lambda v: np.array([[*v, 0.0]])
    return Observation(
        t=70,
        slot_task=task,
        slot_s=s_,
        slot_arrival=np.zeros((E, K), int),
        slot_deadline=np.full((E, K), 150),
        slot_cap=np.full((E, K), 300),
        slot_pred=f(pred),
        slot_pred_s=s_,
        n_queued=np.array([2]),
        done=np.array([False]),
        n_nodes=2,
        max_active=K,
        obs_every=10,
        slot_pred_lo=f(lo),
        slot_pred_hi=f(hi),
    )


def test_shapes_and_v1_part_unchanged():
    o = hand_obs()
    t1, p1 = obs_to_tokens(o, 350.0, "v1")
    t2, p2 = obs_to_tokens(o, 350.0, "v2")
    s1, f1 = n_features("v1")
    s2, f2 = n_features("v2")
    assert t1.shape == (1, 4, f1) == (1, 4, 10) and t2.shape == (1, 4, f2) == (1, 4, 20)
    assert torch.equal(p1, p2)
    assert torch.equal(t2[..., :s1], t1[..., :s1])  # v1's slot features first
    assert torch.equal(t2[..., s2:], t1[..., s1:])  # same global features last
    assert torch.equal(t1, obs_to_tokens(o)[0])  # default = v1 (the shipped policies)
    assert (t2[0, 3][:s2] == 0).all()  # absent slot: zero slot features
    with pytest.raises(ValueError, match="mat.net.features"):
        obs_to_tokens(o, 350.0, "v9")


def test_v2_values_by_hand():
    """Every v2 feature recomputed from the observation's own fields: median 100 / band [95, 150] on slot 0,
    median 100 / band [20, 140] on slot 1 (so the Slack-FM-q quantile, below q10, is < 20), slot 2 cold."""
    o = hand_obs()
    t, _ = obs_to_tokens(o, 350.0, "v2")
    x = t[0].double().numpy()
    tau = 80.0
    q0 = band_quantile(95.0, 100.0, 150.0, BAND_Q)
    q1 = band_quantile(20.0, 100.0, 140.0, BAND_Q)
    assert q0 > tau and q1 < tau  # slot 0 hopeless at the quantile, slot 1 finishable
    np.testing.assert_allclose(x[0, 7:10], [(tau - 95) / 350, (tau - 150) / 350, (tau - q0) / 350], atol=1e-6)
    np.testing.assert_allclose(x[1, 7:10], [(tau - 20) / 350, (tau - 140) / 350, (tau - q1) / 350], atol=1e-6)
    np.testing.assert_array_equal(x[0, 10:13], [0, 0, 1])  # hopeless (median rule too: 100 > 80)
    np.testing.assert_array_equal(x[1, 10:13], [1, 0, 0])  # finishable at the quantile although the median says no
    np.testing.assert_array_equal(x[2, 10:13], [0, 1, 0])  # cold (1 observation)
    np.testing.assert_allclose(x[0, 13], np.log1p(150) - np.log1p(95), atol=1e-6)
    np.testing.assert_allclose(x[:3, 14], [4 / 40, 4 / 40, 1 / 40], atol=1e-7)
    np.testing.assert_allclose(x[:3, 15], [260 / 350, 260 / 350, 290 / 350], atol=1e-6)
    np.testing.assert_array_equal(x[:3, 16], [1, 1, 1])
    assert x[0, 6] == 0 and x[1, 6] == 0  # v1's median-feasible flag says hopeless for both


def test_tokens_read_only_the_observation():
    """No truth leak: the tokens are a function of the Observation's inputs. Two observations that differ only in
    the band the predictor reported give different v2 tokens; identical inputs give identical tokens whatever
    the task (the Observation holds no curve, no bank row, no true remaining batches)."""
    a, b = hand_obs(), hand_obs()
    assert torch.equal(obs_to_tokens(a, 350.0, "v2")[0], obs_to_tokens(b, 350.0, "v2")[0])
    c = hand_obs(lo=(95.0, 90.0, 40.0))
    assert not torch.equal(obs_to_tokens(a, 350.0, "v2")[0], obs_to_tokens(c, 350.0, "v2")[0])
    assert not any("curve" in k or "bank" in k or "true" in k for k in vars(a))


def test_policy_feature_set_and_old_checkpoints():
    p2 = MATPolicy(n_slots=4, n_nodes=2, d_model=8, d_ff=16, decoder="plackett_luce", features="v2")
    assert p2.slot_in.in_features == 20 and p2.global_in.in_features == 3
    t, pres = obs_to_tokens(hand_obs(), 350.0, "v2")
    a, _, _ = p2.act(t, pres, deterministic=True)
    assert a.shape == (1, 2)
    old = MATPolicy(n_slots=4, n_nodes=2, d_model=8, d_ff=16)  # a checkpoint's hparams without `features`
    assert old.features == "v1" and old.slot_in.in_features == 10


def test_imitation_teacher_from_config():
    from hydra import compose, initialize_config_dir

    from mara.core.config import CONF_DIR, build_allocators, load_method_cfg

    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        band = compose("train", overrides=["experiment=band"])
        default = compose("train", overrides=["mat=default"])  # MARA-QR: the band recipe on the decision head
        clone = compose("train", overrides=["mat=clone", "predictor=fm"])
    assert band.mat.imitation.teacher == "Slack-FM-q" and band.mat.net.features == "v2"
    assert (
        default.mat.imitation.teacher == "Slack-QR-q" and default.mat.net.features == "v2"
    )  # band on the decision head
    assert list(default.mat.workload.load) == [0.04, 0.05, 0.06, 0.07] and default.mat.validation.n_episodes * 5 >= 180
    assert clone.mat.imitation.teacher == "Slack-FM" and clone.mat.net.get("features", "v1") == "v1"
    teacher = build_allocators(load_method_cfg(band.mat.imitation.teacher))[0][1]
    assert teacher.quantile == BAND_Q  # the tokens' quantile is the teacher's
    o = hand_obs()
    acts = teacher.act(o)
    assert acts[0, 0] == 1  # Slack-FM-q serves slot 1 first (finishable at the quantile), the median rule would not
    median = build_allocators(load_method_cfg(clone.mat.imitation.teacher))[0][1]
    assert median.act(o)[0, 0] != 1


def test_mixed_loads_cycle_per_batch():
    assert batch_load(0.05, 3) == 0.05
    loads = [0.04, 0.05, 0.06, 0.07]
    assert [batch_load(loads, i) for i in range(6)] == [0.04, 0.05, 0.06, 0.07, 0.04, 0.05]


def test_truth_teacher_is_slack_truth_step_by_step():
    """The privileged DAgger teacher labels, in an env that carries FM estimates, exactly what Slack-Truth does in
    the same episodes run with the truth predictor (same actions at every step); the student's tokens from the
    FM env do not change with the teacher."""
    from mara.curves.bank import default_bank_path, load_bank
    from mara.mat.imitation import TruthTeacher, build_teacher
    from mara.predictors.factory import predictor_from
    from mara.sim.env import BatchedEnv
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    bank = load_bank(default_bank_path())
    mk = lambda: generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], 0.06, 1000, 2, n_steps=150)
    truth_env = BatchedEnv(mk(), bank, predictor=predictor_from("truth", bank.path))
    fm_env = BatchedEnv(mk(), bank, predictor=predictor_from("fm", bank.path))
    teacher = build_teacher("Slack-Truth")
    assert isinstance(teacher, TruthTeacher) and not isinstance(build_teacher("Slack-FM-q"), TruthTeacher)
    slack_truth = build_teacher("Slack-FM")  # the plain least-slack rule, fed truth estimates by truth_env
    o, o_fm = truth_env.reset(), fm_env.reset()
    served_warm = 0
    for _ in range(150):
        a = slack_truth.act(o)
        tok_before = obs_to_tokens(o_fm, 350.0, "v2")[0]
        np.testing.assert_array_equal(teacher.act_env(fm_env), a)
        assert torch.equal(obs_to_tokens(fm_env.observe(), 350.0, "v2")[0], tok_before)
        served_warm += int(((o.n_obs >= 4) & o.present).sum())
        o, o_fm = truth_env.step(a)[0], fm_env.step(a)[0]
        if o.done.all():
            break
    assert served_warm > 0


def test_validation_load_with_mixed_training_loads():
    from mara.mat.settings import MatSettings, ValidationSettings, WorkloadSettings, validation_load

    assert validation_load(MatSettings(net={}, workload=WorkloadSettings(load=0.04))) == 0.04
    assert validation_load(MatSettings(net={}, workload=WorkloadSettings(load=(0.04, 0.07, 0.05)))) == 0.07
    assert (
        validation_load(
            MatSettings(net={}, workload=WorkloadSettings(load=(0.04, 0.07)), validation=ValidationSettings(load=0.06))
        )
        == 0.06
    )
