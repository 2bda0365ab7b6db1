"""MAT network: masks (Eq. 2), teacher forcing = autoregressive decoding, causal dependence on earlier nodes."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mara.mat.allocator import PolicyAllocator
from mara.mat.features import N_FEATURES, obs_to_tokens
from mara.mat.nets import MATPolicy, choice_mask, to_env_actions
from mara.sim.env import IDLE, BatchedEnv

torch.set_num_threads(1)
K, M = 10, 7


@pytest.fixture(scope="module")
def bank():
    from mara.curves.bank import default_bank_path, load_bank

    return load_bank(default_bank_path())


@pytest.fixture(scope="module")
def small_episodes(bank):
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    return generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], 0.08, 123_456, 4, n_steps=100)


def _policy(seed=0):
    torch.manual_seed(seed)
    p = MATPolicy(n_slots=K, n_nodes=M)
    with torch.no_grad():  # untrained heads are near-uniform; sharpen them so the checks are not vacuous
        for head in (p.ptr_q, p.idle_head):
            head.weight.normal_(0, 0.3)
    return p


def _inputs(E, seed, p_present=0.6):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randn(E, K, N_FEATURES, generator=g)
    present = torch.rand(E, K, generator=g) < p_present
    return tokens, present


@pytest.mark.parametrize("deterministic", [False, True])
def test_teacher_forced_logprobs_equal_autoregressive(deterministic):
    p = _policy()
    tokens, present = _inputs(64, 1)
    with torch.no_grad():
        actions, logprob, value = p.act(tokens, present, deterministic, torch.Generator().manual_seed(3))
        logprob_tf, entropy, value_tf = p.evaluate(tokens, present, actions)
    torch.testing.assert_close(logprob_tf, logprob, atol=1e-5, rtol=0)
    torch.testing.assert_close(value_tf, value)
    assert torch.all(entropy >= 0)


def test_argmax_is_mode_of_teacher_forced_logits():
    p = _policy()
    tokens, present = _inputs(32, 2)
    with torch.no_grad():
        actions, _, _ = p.act(tokens, present, deterministic=True)
        mem, allow_k, _ = p.encode(tokens, present)
        logits = p.decode(mem, allow_k, present, actions)
    assert torch.equal(logits.argmax(-1), actions)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), p_present=st.floats(0.0, 1.0))
def test_sampled_joint_actions_respect_masks(seed, p_present):
    p = _policy(seed % 3)
    tokens, present = _inputs(16, seed, p_present)
    with torch.no_grad():
        actions, _, _ = p.act(tokens, present, generator=torch.Generator().manual_seed(seed))
    a = to_env_actions(actions, K)
    for e in range(16):
        slots = a[e][a[e] != IDLE]
        assert len(set(slots.tolist())) == len(slots)  # Eq. 2: a task gets at most one node
        assert present[e, slots].all()  # never a padded slot


def test_masks_remove_taken_and_absent_slots_idle_always_allowed():
    present = torch.tensor([[True, False, True]])
    actions = torch.tensor([[2, 3, 0]])  # node 0 takes slot 2, node 1 idles, node 2 takes slot 0
    allow = choice_mask(present, actions)[0]
    assert allow.tolist() == [[True, False, True, True], [True, False, False, True], [True, False, False, True]]


def test_changing_node_i_changes_only_later_logits():
    p = _policy()
    tokens, present = _inputs(1, 5, p_present=1.0)
    with torch.no_grad():
        actions, _, _ = p.act(tokens, present, deterministic=True)
        mem, allow_k, _ = p.encode(tokens, present)
        base = p.decode(mem, allow_k, present, actions)
        for i in range(M - 1):
            changed = actions.clone()
            free = [k for k in range(K + 1) if k not in actions[0, :i].tolist() and k != actions[0, i]]
            changed[0, i] = free[0]
            logits = p.decode(mem, allow_k, present, changed)
            assert torch.equal(logits[0, : i + 1], base[0, : i + 1])  # nodes 0..i are unaffected
            assert not torch.allclose(logits[0, i + 1 :], base[0, i + 1 :])  # later nodes see the change


def test_env_accepts_policy_actions(bank, small_episodes):
    env = BatchedEnv(small_episodes, bank, compute_reward=True)
    obs = env.reset()
    alloc = PolicyAllocator(_policy(), deterministic=False)
    for _ in range(150):  # the env raises on any Eq. 2 violation or empty-slot assignment
        a = alloc.act(obs)
        assert a.shape == (small_episodes.E, M)
        obs, _, _, _ = env.step(a)


def test_tokens_are_zero_for_absent_slots(bank, small_episodes):
    env = BatchedEnv(small_episodes, bank)
    obs = env.reset()
    for _ in range(40):
        obs, *_ = env.step(np.full((small_episodes.E, M), IDLE))
    tokens, present = obs_to_tokens(obs)
    assert tokens.shape == (small_episodes.E, K, N_FEATURES)
    assert torch.all(tokens[~present][:, :7] == 0)
    assert torch.isfinite(tokens).all()
