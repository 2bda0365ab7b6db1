"""Plackett–Luce decoder: exact log-probabilities against brute-force enumeration, sampling frequencies,
argmax = best slots above idle, and the MATPolicy wiring (teacher forcing = sampling, masks, imitation)."""

import itertools
import math

import numpy as np
import pytest
import torch

from mara.mat import plackett_luce as pl
from mara.mat.features import N_FEATURES, N_SLOT_FEATURES
from mara.mat.nets import MATPolicy

torch.set_num_threads(1)


def _sequence_prob(scores, present, seq):
    """Independent reference: the sequential pick process written out with Python floats."""
    K = len(present)
    taken, p = set(), 1.0
    for a in seq:
        allowed = [k for k in range(K) if present[k] and k not in taken] + [K]
        if a not in allowed:
            return 0.0
        z = sum(math.exp(scores[c]) for c in allowed)
        p *= math.exp(scores[a]) / z
        if a < K:
            taken.add(a)
    return p


@pytest.mark.parametrize(
    "K,M,present", [(3, 2, [1, 1, 1]), (3, 3, [1, 0, 1]), (4, 3, [1, 1, 1, 1]), (2, 4, [1, 1]), (3, 2, [0, 0, 0])]
)
def test_log_prob_matches_brute_force_enumeration(K, M, present):
    g = torch.Generator().manual_seed(K * 10 + M)
    scores = torch.randn(1, K + 1, generator=g, dtype=torch.float64) * 1.5
    pres = torch.tensor([present], dtype=torch.bool)
    seqs = list(itertools.product(range(K + 1), repeat=M))
    acts = torch.tensor(seqs)
    lp = pl.log_prob(scores.expand(len(seqs), -1), pres.expand(len(seqs), -1), acts)
    ref = np.array([_sequence_prob(scores[0].tolist(), present, s) for s in seqs])
    valid = ref > 0
    assert valid.sum() > 0
    np.testing.assert_allclose(lp.exp().numpy()[valid], ref[valid], rtol=1e-10)
    assert np.isclose(lp.exp().numpy()[valid].sum(), 1.0)  # a distribution over the valid joint actions
    assert np.all(lp.exp().numpy()[~valid] == 0.0)  # repeated or absent slots are impossible (Eq. 2)


def test_sampling_frequencies_match_probabilities():
    K, M, n = 3, 3, 40_000
    present = torch.tensor([[True, False, True]])
    scores = torch.tensor([[0.5, 2.0, -0.3, 0.1]], dtype=torch.float64)
    acts = pl.sample(scores.expand(n, -1), present.expand(n, -1), M, generator=torch.Generator().manual_seed(0))
    counts = {}
    for row in acts.tolist():
        counts[tuple(row)] = counts.get(tuple(row), 0) + 1
    seqs = list(itertools.product(range(K + 1), repeat=M))
    probs = {s: _sequence_prob(scores[0].tolist(), [1, 0, 1], s) for s in seqs}
    assert set(counts) <= {s for s, p in probs.items() if p > 0}  # never an invalid joint action
    tv = 0.5 * sum(abs(counts.get(s, 0) / n - p) for s, p in probs.items())
    assert tv < 0.015, tv


def test_argmax_serves_best_present_slots_above_idle():
    scores = torch.tensor([[3.0, -1.0, 2.0, 5.0, 0.5, 0.0]])  # K = 5, idle = 0.0
    present = torch.tensor([[True, True, True, False, True]])
    a = pl.sample(scores, present, 4, deterministic=True)
    assert a.tolist() == [[0, 2, 4, 5]]  # slot 3 absent, slot 1 far below idle; then idle
    a = pl.sample(scores, present, 2, deterministic=True)
    assert a.tolist() == [[0, 2]]


@pytest.mark.parametrize("K,M", [(3, 2), (3, 3), (4, 3), (2, 4), (5, 2)])
def test_mode_is_the_most_likely_joint_action(K, M):
    """The deterministic decode is the argmax of the exact probability over every joint action (brute force)."""
    g = torch.Generator().manual_seed(100 + K * 10 + M)
    seqs = torch.tensor(list(itertools.product(range(K + 1), repeat=M)))
    for trial in range(30):
        scores = torch.randn(1, K + 1, generator=g, dtype=torch.float64) * (0.1 if trial % 3 == 0 else 2.0)
        present = torch.rand(1, K, generator=g) < 0.7
        lp = pl.log_prob(scores.expand(len(seqs), -1), present.expand(len(seqs), -1), seqs)
        a = pl.mode(scores, present, M)
        lp_mode = pl.log_prob(scores, present, a)
        assert torch.isclose(lp_mode[0], lp.max(), rtol=0, atol=1e-9), (scores, present, a)
    # near-uniform scores with idle marginally ahead: greedy would idle every node, the mode serves the best slot
    assert pl.mode(torch.tensor([[0.0, 0.01]]), torch.tensor([[True]]), 2).tolist() == [[0, 1]]


def _pl_policy(seed=0, K=10, M=7):
    torch.manual_seed(seed)
    p = MATPolicy(n_slots=K, n_nodes=M, decoder="plackett_luce")
    with torch.no_grad():
        for head in (p.ptr_q, p.idle_head):
            head.weight.normal_(0, 0.3)
    return p


@pytest.mark.parametrize("deterministic", [False, True])
def test_policy_sampled_logprob_equals_teacher_forced(deterministic):
    p = _pl_policy()
    g = torch.Generator().manual_seed(1)
    tokens, present = torch.randn(128, 10, N_FEATURES, generator=g), torch.rand(128, 10, generator=g) < 0.6
    with torch.no_grad():
        a, logprob, value = p.act(tokens, present, deterministic, torch.Generator().manual_seed(3))
        logprob_tf, entropy, value_tf = p.evaluate(tokens, present, a)
    torch.testing.assert_close(logprob_tf, logprob)
    torch.testing.assert_close(value_tf, value)
    assert torch.all(entropy >= 0)
    served = torch.nn.functional.one_hot(a, 11)[..., :10].sum(1)
    assert served.max() <= 1 and not (served.bool() & ~present).any()  # Eq. 2 and present slots only


def test_policy_has_no_decoder_blocks_and_cost_is_independent_of_nodes():
    small, big = MATPolicy(n_nodes=2, decoder="plackett_luce"), MATPolicy(n_nodes=50, decoder="plackett_luce")
    assert not hasattr(small, "dec_blocks")
    assert sum(x.numel() for x in small.parameters()) == sum(x.numel() for x in big.parameters())
    with pytest.raises(ValueError, match="decoder"):
        MATPolicy(decoder="nope")


def test_behaviour_cloning_learns_a_priority_rule():
    """BC through the PL likelihood: the teacher serves present slots in order of feature 1, up to M; idle after."""
    from mara.mat.imitation import clone, served_sets_equal

    K, M, n = 10, 3, 2048
    g = torch.Generator().manual_seed(0)
    tokens = torch.randn(n, K, N_FEATURES, generator=g)
    present = torch.rand(n, K, generator=g) < 0.5
    key = tokens[..., 1].masked_fill(~present, -1e9)
    order = key.argsort(dim=1, descending=True)[:, :M]
    actions = torch.where(torch.gather(present, 1, order), order, torch.full_like(order, K))
    data = {"tokens": tokens, "present": present, "actions": actions}
    p = MATPolicy(n_slots=K, n_nodes=M, decoder="plackett_luce")
    clone(p, data, epochs=30, lr=3e-3, batch_size=256, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, _, _ = p.act(tokens, present, deterministic=True)
    agree = served_sets_equal(a, actions, K).float().mean().item()
    assert agree > 0.9, agree


def test_shipped_checkpoints_load_with_their_recorded_decoder():
    """Checkpoints written before the decoder was recorded (mara_live.ckpt) are autoregressive and load strictly;
    the others (mara_zoo_seed*.ckpt: Plackett–Luce, v2 tokens) load as recorded."""
    from pathlib import Path

    from mara.mat.allocator import MATAllocator

    ckpts = sorted((Path(__file__).resolve().parents[1] / "mara" / "data" / "checkpoints").glob("mara_*.ckpt"))
    ckpts = [ck for ck in ckpts if ck.name != "mara_trace.ckpt"]  # the trace policy is a job scorer, not a MAT
    assert ckpts
    old = 0
    for ck in ckpts:
        net = torch.load(ck, map_location="cpu", weights_only=False)["hyper_parameters"]["net"]
        policy = MATAllocator(str(ck)).policy
        assert policy.decoder == net.get("decoder", "autoregressive")
        assert policy.features == net.get("features", "v1")
        old += "decoder" not in net
    assert old >= 1  # at least one checkpoint without a recorded decoder keeps the old-format path tested


def test_slot_buckets_change_nothing_but_cost():
    """Dropping absent slot tokens per bucket gives the same scores, values, log-probs and gradients."""
    torch.manual_seed(0)
    full = MATPolicy(decoder="plackett_luce", d_model=16, d_ff=32)
    packed = MATPolicy(decoder="plackett_luce", d_model=16, d_ff=32, slot_buckets=[2, 4, 7])
    packed.load_state_dict(full.state_dict())
    g = torch.Generator().manual_seed(5)
    tokens = torch.randn(300, 10, N_FEATURES, generator=g)
    present = torch.rand(300, 10, generator=g) < torch.linspace(0.0, 1.0, 300)[:, None]  # every count 0..10
    tokens[..., :N_SLOT_FEATURES] *= present[..., None]  # as obs_to_tokens: slot features 0 where absent,
    tokens[..., N_SLOT_FEATURES:] = tokens[:, :1, N_SLOT_FEATURES:]  # the global features repeated in every token
    s_full, v_full = full.encode_scores(tokens, present)
    s_pack, v_pack = packed.encode_scores(tokens, present)
    slot_ok = torch.cat([present, torch.ones(300, 1, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(s_pack[slot_ok], s_full[slot_ok], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v_pack, v_full, atol=1e-5, rtol=1e-5)
    a, lp, _ = full.act(tokens, present, generator=torch.Generator().manual_seed(1))
    lp2, ent2, _ = packed.evaluate(tokens, present, a)
    torch.testing.assert_close(lp2, lp, atol=1e-4, rtol=1e-5)
    lp1, ent1, _ = full.evaluate(tokens, present, a)
    (lp1.sum() + ent1.sum()).backward()
    (lp2.sum() + ent2.sum()).backward()
    for (name, p1), p2 in zip(full.named_parameters(), packed.parameters()):
        torch.testing.assert_close(p2.grad, p1.grad, atol=1e-4, rtol=1e-3, msg=name)
    assert torch.equal(
        packed.act(tokens, present, deterministic=True)[0], full.act(tokens, present, deterministic=True)[0]
    )
    assert MATPolicy(decoder="autoregressive", slot_buckets=[4]).buckets == [10]  # not used by the paper's decoder
    assert MATPolicy(n_slots=5, decoder="plackett_luce", slot_buckets=[4, 7]).buckets == [4, 5]
