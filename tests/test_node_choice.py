"""The policy's node choice on unequal nodes (mara/mat/node_choice.py, ``mat.net.node_head``): pair features by hand,
an exact and normalised log-probability, valid decoding, the head's sampled log-probability equal to its teacher-forced
one, identical nodes untouched, imitation that learns a rule's placement, the rules' placed actions as labels, and the
recipe trained end to end."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from mara.mat import node_choice
from mara.mat.features import n_features, obs_to_tokens
from mara.mat.nets import MATPolicy
from mara.mat.settings import PPOSettings
from tests.test_mat_hetero import _hetero_env, hetero_obs

torch.set_num_threads(1)


def _policy(node_head=True, seed=0):
    torch.manual_seed(seed)
    return MATPolicy(
        n_slots=4,
        n_nodes=3,
        d_model=16,
        d_ff=32,
        decoder="plackett_luce",
        features="v3",
        node_head=node_head,
        token_q=0.05,
        token_band=[0.05, 0.9],
    )


def test_pair_features_by_hand():
    """hetero_obs: speeds [2, 1, 1], switch cost 2, τ = 80; slot 0 (median 100, band [95, 150]) ran on node 0 and owes
    1 set-up step there; slot 1 (median 100, band [20, 140]) was served before, not at t−1; slot 3 is empty."""
    x = node_choice.pair_features(hetero_obs(), 350.0)
    assert x.shape == (1, 3, 4, node_choice.N_PAIR) and x.dtype == np.float32
    s = 350.0
    # node 0, slot 0: its own node, 1 set-up step, then ceil(100 / 2) = 50 steps
    np.testing.assert_allclose(
        x[0, 0, 0], [1.0, 1.0, 0.1, (80 - 51) / s, (80 - 49) / s, (80 - 76) / s, 51 / s], rtol=1e-6
    )
    # node 1, slot 0: half speed, a move pays the switch cost 2
    np.testing.assert_allclose(
        x[0, 1, 0], [0.5, 0.0, 0.2, (80 - 102) / s, (80 - 97) / s, (80 - 152) / s, 102 / s], rtol=1e-6
    )
    # node 2, slot 1: resumed (switch cost), band ends 20 and 140
    np.testing.assert_allclose(
        x[0, 2, 1], [0.5, 0.0, 0.2, (80 - 102) / s, (80 - 22) / s, (80 - 142) / s, 102 / s], rtol=1e-6
    )
    assert not x[0, :, 3].any()  # the empty slot
    assert list(node_choice.node_order([1, 3, 1, 3])) == [1, 3, 0, 2]


def test_node_log_prob_is_normalised_over_every_placement():
    """For a chosen set, the probabilities of all placements (each chosen task on exactly one node, the other nodes
    idle) sum to 1, and placements that break the rule are impossible to decode."""
    g = torch.Generator().manual_seed(1)
    M, K = 3, 4
    logits = torch.randn(1, M, K + 1, generator=g)
    order = torch.as_tensor(node_choice.node_order([1, 2, 1]))
    for chosen_slots in ([], [2], [0, 3], [0, 1, 2]):
        chosen = torch.zeros(1, K, dtype=torch.bool)
        chosen[0, chosen_slots] = True
        total = 0.0
        for nodes in itertools.product(range(K + 1), repeat=M):
            served = [a for a in nodes if a < K]
            if sorted(served) != sorted(chosen_slots):
                continue
            total += float(node_choice.log_prob(logits, chosen, torch.tensor([nodes]), order).exp())
        assert total == pytest.approx(1.0, abs=1e-5)


def test_decode_places_every_chosen_task_once():
    g = torch.Generator().manual_seed(2)
    E, M, K = 256, 5, 7
    logits = torch.randn(E, M, K + 1, generator=g)
    chosen = torch.rand(E, K, generator=g) < 0.5
    while (chosen.sum(1) > M).any():  # at most M tasks chosen: drop the first chosen slot of rows with more
        rows = chosen.sum(1) > M
        chosen[rows, chosen[rows].float().argmax(1)] = False
    order = torch.as_tensor(node_choice.node_order([3, 1, 2, 1, 2]))
    for det in (True, False):
        out = node_choice.decode(logits, chosen, order, det, torch.Generator().manual_seed(3))
        for row, c in zip(out.tolist(), chosen.tolist()):
            served = [a for a in row if a < K]
            assert sorted(served) == [k for k in range(K) if c[k]]


def test_act_nodes_log_prob_equals_the_teacher_forced_one():
    pol = _policy()
    tok, present = obs_to_tokens(hetero_obs(), 350.0, "v3", q=0.05, band=(0.05, 0.9))
    tok, present = tok.expand(16, -1, -1), present.expand(16, -1)
    pairs = torch.as_tensor(node_choice.pair_features(hetero_obs(), 350.0)).expand(16, -1, -1, -1)
    order = torch.as_tensor(node_choice.node_order([2, 1, 1]))
    picks, nodes, logp, _ = pol.act_nodes(tok, present, pairs, order, False, torch.Generator().manual_seed(0))
    torch.testing.assert_close(
        pol.evaluate_nodes(tok, present, picks, pairs, nodes, order)[0], logp, atol=1e-5, rtol=1e-5
    )
    assert len({tuple(r) for r in nodes.tolist()}) > 1  # sampled: the check covers several placements


def test_identical_nodes_act_on_picks_alone():
    """On identical nodes with free preemption the head is not used: the same weights with and without it act alike."""
    from mara.mat.allocator import PolicyAllocator

    flat = hetero_obs(hetero=False)
    with_head, without = _policy(True), _policy(False)
    without.load_state_dict({k: v for k, v in with_head.state_dict().items() if k in without.state_dict()})
    np.testing.assert_array_equal(
        PolicyAllocator(with_head, scale=350.0).act(flat), PolicyAllocator(without, scale=350.0).act(flat)
    )


def test_head_needs_plackett_luce():
    with pytest.raises(ValueError, match="node_head needs mat.net.decoder=plackett_luce"):
        MATPolicy(n_slots=4, n_nodes=3, d_model=8, d_ff=16, node_head=True)


def test_labels_are_the_teachers_own_placed_actions():
    """With the displacement move the teacher's placed actions differ from its picks placed greedily in some states;
    the labels (and the actions the env is stepped with in the first round) are its own ``act``."""
    from mara.allocators.slack import SlackRule
    from mara.curves.bank import default_bank_path, load_bank
    from mara.mat.imitation import teacher_labels
    from mara.predictors.baselines.wls import WLSPredictor

    bank = load_bank(default_bank_path())
    teacher = SlackRule(quantile=0.05, displace=True)
    env = _hetero_env(bank, 100321, WLSPredictor())
    moved = 0
    for _ in range(100):
        picks, acts = teacher_labels(teacher, env)
        np.testing.assert_array_equal(acts, np.concatenate([teacher.act(o) for o in env.group_obs]))
        moved += int((env.place(picks) != acts).any(axis=1).sum())
        env.step(acts)
    assert moved > 0


def test_imitation_learns_the_rules_placement():
    """Cloning a displacing rule's placed actions on unequal nodes: the head's placement agrees with the rule's in far
    more states after training than before (the policy's own picks are the teacher's there)."""
    from mara.allocators.slack import SlackRule
    from mara.curves.bank import default_bank_path, load_bank
    from mara.mat.imitation import clone, collect_labelled_states, node_agreement
    from mara.predictors.baselines.wls import WLSPredictor

    bank = load_bank(default_bank_path())
    teacher = SlackRule(quantile=0.05, displace=True)
    pol = MATPolicy(n_slots=5, n_nodes=3, d_model=16, d_ff=32, decoder="plackett_luce", features="v3", node_head=True)
    data = collect_labelled_states(
        _hetero_env(bank, 100321, WLSPredictor(), E=16), teacher, 100, feature_set="v3", node_labels=True
    )
    assert data["pairs"].shape[1:] == (3, 5, node_choice.N_PAIR) and data["nodes"].shape == data["actions"].shape
    before = node_agreement(pol, data)
    clone(pol, data, 15, 3e-3, 256, torch.Generator().manual_seed(0))
    after = node_agreement(pol, data)
    assert after > 0.8 and after > before + 0.3, (before, after)


def test_suite_nodes_recipe_trains_and_acts_on_unequal_nodes(tmp_path):
    from mara.curves.bank import default_bank_path, load_bank
    from mara.mat.allocator import MATAllocator
    from mara.predictors.factory import predictor_from
    from mara.sim.env import BatchedEnv, run_episodes
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes
    from tests.test_mat_suite import train_tiny_suite

    summary = train_tiny_suite(tmp_path, "suite_nodes")
    rounds = summary["imitation"]["rounds"]
    assert rounds[-1]["node_agreement_train"][0] is None and 0.0 <= rounds[-1]["node_agreement_train"][1] <= 1.0
    alloc = MATAllocator(summary["best_ckpt"])
    assert alloc.policy.node_head
    bank = load_bank(default_bank_path())
    ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], 0.06, 1000, 2, n_steps=80)
    env = BatchedEnv(
        ep,
        bank,
        n_nodes=4,
        max_active=6,
        predictor=predictor_from("qr_q", bank.path),
        node_speed=[3, 1, 1, 1],
        switch_cost=1,
    )
    assert len(run_episodes(env, alloc)["success_rate"]) == 2
    assert n_features("v3")[1] == alloc.policy.slot_in.in_features


def test_ppo_with_the_node_head_scores_what_it_sampled():
    """PPO rollouts of a policy with a node head on unequal nodes step the env with the head's placement and record
    it: the stored log-probability is the teacher-forced one of picks and placement, and one update runs on it."""
    from mara.curves.bank import default_bank_path, load_bank
    from mara.mat import ppo
    from mara.mat.losses import gae
    from mara.mat.rollout import collect_rollout
    from mara.predictors.baselines.wls import WLSPredictor

    bank = load_bank(default_bank_path())
    pol = MATPolicy(n_slots=5, n_nodes=3, d_model=16, d_ff=32, decoder="plackett_luce", features="v3", node_head=True)
    buf = collect_rollout(pol, _hetero_env(bank, 100321, WLSPredictor()), 12, torch.Generator().manual_seed(0))
    assert buf.nodes.shape == buf.actions.shape and buf.pairs.shape[2:] == (3, 5, node_choice.N_PAIR)
    adv, ret = gae(buf.rewards, buf.values, buf.dones, buf.last_value, 1.0, 0.95)
    batch = ppo.flatten(buf, adv, ret)
    lp, _, _ = pol.evaluate_nodes(
        batch["tokens"], batch["present"], batch["actions"], batch["pairs"], batch["nodes"], batch["order"]
    )
    torch.testing.assert_close(lp, batch["logprobs"], atol=1e-4, rtol=1e-4)
    cfg = PPOSettings(update_epochs=1, norm_adv=True, clip_coef=0.2, vf_coef=1.0, ent_coef=0.0)
    opt = torch.optim.Adam(pol.parameters(), lr=1e-3)
    stats = ppo.update(
        pol, opt, batch, cfg, 2, torch.Generator().manual_seed(0), lambda loss: loss.backward(), lambda: None
    )
    assert len(stats["policy_loss"]) == 2
