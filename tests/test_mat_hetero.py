"""The learned allocator on heterogeneous nodes: v3 tokens (node features), the rules' placement applied to
the policy's ordered picks, imitation labels before placement, the entry points (train accepts, evaluate drops the
identical-node shipped policies)."""

from __future__ import annotations

import numpy as np
import torch

from mara.allocators.placement import place, place_policy
from mara.allocators.slack import band_quantile
from mara.mat.features import BAND_Q, n_features, obs_to_tokens
from mara.sim.env import Observation

torch.set_num_threads(1)


def hetero_obs(hetero=True):
    """One episode, K = 4 slots (slot 3 empty), 3 nodes at speeds [2, 1, 1], switch cost 2, t = 70, deadlines 150
    (τ = 80). Slot 0: warm, median 100 / band [95, 150], ran on node 0 (speed 2) at t-1 and owes 1 set-up step;
    slot 1: warm, median 100 / band [20, 140], served before but paused at t-1; slot 2: cold, never served."""
    E, K = 1, 4
    task = np.array([[0, 1, 2, -1]])
    s_ = np.array([[40, 40, 0, 0]])
    f = lambda v: np.array([[*v, 0.0]])  # noqa: E731
    nodes = (
        dict(
            node_speed=np.array([2, 1, 1]),
            switch_cost=2,
            last_node=np.array([[0, -1, -1, -1]]),
            started=np.array([[True, True, False, False]]),
            setup_left=np.array([[1, 0, 0, 0]]),
        )
        if hetero
        else {}
    )
    return Observation(
        t=70,
        slot_task=task,
        slot_s=s_,
        slot_arrival=np.zeros((E, K), int),
        slot_deadline=np.full((E, K), 150),
        slot_cap=np.full((E, K), 300),
        slot_pred=f((100.0, 100.0, 50.0)),
        slot_pred_s=s_,
        n_queued=np.array([2]),
        done=np.array([False]),
        n_nodes=3,
        max_active=K,
        obs_every=10,
        slot_pred_lo=f((95.0, 20.0, 40.0)),
        slot_pred_hi=f((150.0, 140.0, 60.0)),
        **nodes,
    )


def test_v3_tokens_by_hand():
    o = hetero_obs()
    t3, p3 = obs_to_tokens(o, 350.0, "v3")
    t2, p2 = obs_to_tokens(o, 350.0, "v2")
    s2, _ = n_features("v2")
    s3, f3 = n_features("v3")
    assert t3.shape == (1, 4, f3) == (1, 4, 34) and torch.equal(p2, p3)
    assert torch.equal(t3[..., :s2], t2[..., :s2]) and torch.equal(t3[..., s3:], t2[..., s2:])  # v2 first, same globals
    x = t3[0].double().numpy()[:, s2:s3]
    tau, q0, q1 = 80.0, band_quantile(95.0, 100.0, 150.0, BAND_Q), band_quantile(20.0, 100.0, 140.0, BAND_Q)
    q2 = 300.0  # cold slot: every estimate is the cap left (300 - 0)
    # ran at t-1, its node's speed / top speed, set-up owed / 10, served before, median in top-speed steps / scale
    np.testing.assert_allclose(x[0, :5], [1, 1.0, 0.1, 1, 100 / 2 / 350], atol=1e-6)
    np.testing.assert_allclose(x[1, :5], [0, 0.0, 0.0, 1, 100 / 2 / 350], atol=1e-6)
    np.testing.assert_allclose(x[2, :5], [0, 0.0, 0.0, 0, q2 / 2 / 350], atol=1e-6)
    # slacks at the quantile in fastest-node and slowest-node steps
    np.testing.assert_allclose(x[0, 5:7], [(tau - q0 / 2) / 350, (tau - q0) / 350], atol=1e-6)
    np.testing.assert_allclose(x[1, 5:7], [(tau - q1 / 2) / 350, (tau - q1) / 350], atol=1e-6)
    # Slack-FM-q's stage in fastest-node steps: slot 0 (hopeless on a unit node, q0 > 80) is finishable on a fast one
    assert q0 > tau and q0 / 2 <= tau
    np.testing.assert_array_equal(x[0, 7:10], [1, 0, 0])
    np.testing.assert_array_equal(x[1, 7:10], [1, 0, 0])
    np.testing.assert_array_equal(x[2, 7:10], [0, 1, 0])
    np.testing.assert_array_equal(t2[0, 0, 10:13].numpy(), [0, 0, 1])  # v2's stage (unit steps) said hopeless
    # node profile: 1/3 at the top speed, mean speed 4/3 / 2, top speed 2 / 4, switch cost 2 / 10; absent slot zero
    np.testing.assert_allclose(x[:3, 10:14], np.tile([1 / 3, 2 / 3, 0.5, 0.2], (3, 1)), atol=1e-6)
    assert (x[3] == 0).all()


def test_v3_on_identical_nodes_and_old_feature_sets_unchanged():
    o = hetero_obs(hetero=False)
    t3, _ = obs_to_tokens(o, 350.0, "v3")
    t2, _ = obs_to_tokens(o, 350.0, "v2")
    x = t3[0].double().numpy()[:3, 17:31]
    assert torch.equal(t3[..., :17], t2[..., :17])
    np.testing.assert_allclose(x[:, 0:3], 0.0)  # no node history without the hetero simulator
    np.testing.assert_allclose(x[:, 3], [1, 1, 0])  # served before = processed > 0
    np.testing.assert_allclose(x[:, 10:14], np.tile([1.0, 1.0, 0.25, 0.0], (3, 1)), atol=1e-6)
    # the v1 / v2 tokens of the hetero observation equal those of the same observation on identical nodes
    for fs in ("v1", "v2"):
        assert torch.equal(obs_to_tokens(hetero_obs(), 350.0, fs)[0], obs_to_tokens(o, 350.0, fs)[0])


def test_policy_picks_are_placed_like_the_rules():
    """``place_policy`` is the rules' placement with the median estimate; the identity (same object) on identical nodes.
    By hand on the observation above: picks [1, 0, 2] (priority order) -> slot 0 keeps its node 0 (it holds it: ran
    there at t-1), slot 1 (a resume, pays 2 either way) takes the slower free node 1 (tie -> slower, then lower
    index), slot 2 (first start, free) node 2."""
    from mara.mat.allocator import PolicyAllocator
    from mara.mat.nets import MATPolicy, to_env_actions

    o = hetero_obs()
    picks = np.array([[1, 0, 2]])
    out = place_policy(o, picks)
    np.testing.assert_array_equal(out, [[0, 1, 2]])
    np.testing.assert_array_equal(out, place(o, picks, o.pred_remaining))
    flat = hetero_obs(hetero=False)
    assert place_policy(flat, picks) is picks
    torch.manual_seed(0)
    pol = MATPolicy(n_slots=4, n_nodes=3, d_model=8, d_ff=16, decoder="plackett_luce", features="v3")
    tok, pres = obs_to_tokens(o, 350.0, "v3")
    raw = to_env_actions(pol.act(tok, pres, deterministic=True)[0], 4)
    np.testing.assert_array_equal(PolicyAllocator(pol).act(o), place(o, raw, o.pred_remaining))
    np.testing.assert_array_equal(
        PolicyAllocator(pol).act(flat),
        to_env_actions(pol.act(*obs_to_tokens(flat, 350.0, "v3"), deterministic=True)[0], 4),
    )


def _hetero_env(bank, root, predictor, E=8):
    from mara.mat.rollout import EpisodeStream, TrainingEnv

    stream = EpisodeStream(bank, bank.family_params, "ID", 0.1, root, E, n_steps=120)
    return TrainingEnv(
        stream,
        bank,
        predictor,
        "dense",
        n_nodes=3,
        max_active=5,
        n_groups=2,
        stagger=30,
        node_speed=[2, 1, 1],
        switch_cost=2,
    )


def test_imitation_labels_are_picks_that_place_to_the_teacher_actions():
    """In a heterogeneous training env the labels are the Slack-FM-q picks before placement; a student acting with
    exactly those picks (placed by ``TrainingEnv.place``, as in rollouts) takes the teacher's actions at every step.
    The labels differ from the placed actions in many states (the placement moves tasks), so the check has teeth."""
    from mara.allocators.slack import SlackRule
    from mara.curves.bank import default_bank_path, load_bank
    from mara.mat.imitation import collect_labelled_states, teacher_labels
    from mara.predictors.baselines.wls import WLSPredictor

    bank = load_bank(default_bank_path())
    teacher = SlackRule(quantile=BAND_Q)
    env = _hetero_env(bank, 100321, WLSPredictor())
    differ = steps = 0
    for _ in range(120):
        picks, acts = teacher_labels(teacher, env)
        np.testing.assert_array_equal(env.place(picks), acts)
        np.testing.assert_array_equal(acts, np.concatenate([teacher.act(o) for o in env.group_obs]))
        differ += int((picks != acts).any(axis=1).sum())
        steps += 1
        env.step(env.place(picks))
    assert differ > 20, differ
    data = collect_labelled_states(_hetero_env(bank, 100321, WLSPredictor()), teacher, 40, feature_set="v3")
    assert data["tokens"].shape[-1] == n_features("v3")[1] and len(data["actions"]) > 100


def test_train_accepts_hetero_and_passes_the_nodes_to_the_policy_stage():
    from mara.train_settings import mat_settings, parse
    from tests.test_entrypoints import cfg_for

    cfg = cfg_for("train", ["experiment=hetero"])
    parse(cfg)
    c = mat_settings(cfg).recorded()  # what the policy checkpoint records
    assert c["sim"]["node_speed"] == [2, 2, 1, 1, 1, 1, 1] and c["sim"]["switch_cost"] == 2
    assert c["net"]["features"] == "v3" and c["imitation"]["suite"]  # the one MARA (mat=suite) on predictor qr_q
    assert c["predictor"]["name"] == "qr"
    assert "MARA-suite" in cfg.methods and "Clairvoyant" in cfg.methods
    alone = mat_settings(cfg_for("train", ["experiment=hetero", "mat=hetero", "predictor=qr"])).recorded()
    assert alone["imitation"]["teacher"] == "Slack-QR" and alone["sim"]["node_speed"] == [2, 2, 1, 1, 1, 1, 1]
    plain = mat_settings(cfg_for("train", [])).recorded()
    assert "node_speed" not in plain["sim"] and "switch_cost" not in plain["sim"]  # identical-node hparams unchanged


def test_evaluate_drops_shipped_policies_on_hetero_nodes():
    from mara.evaluate import _without_unfit_shipped

    assert _without_unfit_shipped(["MARA", "FIFO"], {}) == ["FIFO"]
    given = {"MARA": {"checkpoints": [{"train_seed": 0, "ckpt_path": "x.ckpt"}]}}
    assert _without_unfit_shipped(["MARA", "FIFO"], given) == ["MARA", "FIFO"]
    from mara.curves.bank import default_bank_path

    # the shipped MARA-suite policies were trained across clusters: kept; MARA's (identical nodes only): dropped
    assert _without_unfit_shipped(["MARA", "MARA-suite", "FIFO"], {}, default_bank_path()) == ["MARA-suite", "FIFO"]


def test_value_warmup_head_only_leaves_the_policy_unchanged():
    """``ppo.value_warmup_head_only``: a value-only update moves the value head and nothing else (the cloned policy's
    action probabilities are unchanged); without it the shared encoder moves too, and so does the policy."""
    from mara.mat import ppo as ppo_step
    from mara.mat.nets import MATPolicy
    from mara.mat.settings import PPOSettings

    def run(head_only: bool):
        torch.manual_seed(0)
        pol = MATPolicy(n_slots=4, n_nodes=3, d_model=8, d_ff=16, decoder="plackett_luce", features="v3")
        tok, pres = obs_to_tokens(hetero_obs(), 350.0, "v3")
        tok, pres = tok.repeat(8, 1, 1) + 0.1 * torch.randn(8, 4, 34), pres.repeat(8, 1)
        a, logp, v = pol.act(tok, pres, generator=torch.Generator().manual_seed(1))
        batch = {
            "tokens": tok,
            "present": pres,
            "actions": a,
            "logprobs": logp.detach(),
            "values": v.detach(),
            "advantages": torch.randn(8),
            "returns": torch.full((8,), 5.0),
        }
        before = {k: p.detach().clone() for k, p in pol.named_parameters()}
        opt = torch.optim.Adam(pol.parameters(), lr=1e-2)
        cfg = PPOSettings(
            update_epochs=2, norm_adv=True, clip_coef=0.2, vf_coef=1.0, ent_coef=0.0, value_warmup_head_only=head_only
        )
        ppo_step.update(
            pol,
            opt,
            batch,
            cfg,
            2,
            torch.Generator().manual_seed(2),
            lambda l: l.backward(),
            lambda: None,
            value_only=True,
        )
        moved = {k for k, p in pol.named_parameters() if not torch.equal(p, before[k])}
        newlogp = pol.evaluate(tok, pres, a)[0]
        return moved, float((newlogp - logp).abs().max())

    moved, dlogp = run(True)
    assert moved and all(k.startswith("value_head.") for k in moved) and dlogp == 0.0
    moved, dlogp = run(False)
    assert any(not k.startswith("value_head.") for k in moved) and dlogp > 0.0
