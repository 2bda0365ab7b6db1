"""One policy for many clusters (mara/mat/suite.py, recipe mat=suite): the Plackett–Luce network acts at any M and K,
the suite's settings and loads, cloning across settings of different sizes, the displacement placement of a policy's
picks, the teacher/predictor check, the fit check that admits it at any size, and imitation-only training end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mara.core.config import ConfigError
from mara.mat.nets import MATPolicy

torch.set_num_threads(1)


def _tokens(E, K, F, seed=0, n_present=None):
    g = torch.Generator().manual_seed(seed)
    tok = torch.randn(E, K, F, generator=g)
    present = torch.rand(E, K, generator=g) < 0.7
    if n_present is not None:
        present[:, :] = False
        present[:, :n_present] = True
    return tok, present


@pytest.mark.parametrize("M,K", [(3, 6), (5, 8), (12, 16), (1, 1)])
def test_plackett_luce_policy_acts_at_any_size(M, K):
    """A policy built for M = 7, K = 10 acts for other M and K: M picks, each a present slot at most once or idle."""
    from mara.mat.features import n_features

    torch.manual_seed(0)
    pol = MATPolicy(
        n_slots=10, n_nodes=7, d_model=16, d_ff=32, decoder="plackett_luce", features="v3", slot_buckets=[4, 7]
    )
    tok, present = _tokens(64, K, n_features("v3")[1])
    for det in (True, False):
        a, logp, v = pol.act(tok, present, deterministic=det, n_nodes=M)
        assert a.shape == (64, M) and logp.shape == v.shape == (64,)
        for row, p in zip(a.tolist(), present.tolist()):
            slots = [x for x in row if x != K]
            assert len(slots) == len(set(slots)) and all(p[x] for x in slots)
        lp, _, _ = pol.evaluate(tok, present, a)
        torch.testing.assert_close(lp, logp, atol=1e-4, rtol=1e-4)


def test_slot_buckets_follow_the_call_size():
    """Rows with more present slots than the largest training bucket still get a score for every slot: the same
    scores as without buckets (exact up to summation order)."""
    from mara.mat.features import n_features

    torch.manual_seed(0)
    kw = {"n_slots": 10, "n_nodes": 7, "d_model": 16, "d_ff": 32, "decoder": "plackett_luce", "features": "v3"}
    a, b = MATPolicy(**kw, slot_buckets=[4, 7]), MATPolicy(**kw)
    b.load_state_dict(a.state_dict())
    tok, present = _tokens(32, 16, n_features("v3")[1], n_present=14)
    torch.testing.assert_close(a.encode_scores(tok, present)[0], b.encode_scores(tok, present)[0], atol=1e-5, rtol=1e-5)


def test_autoregressive_policy_refuses_other_sizes():
    pol = MATPolicy(n_slots=4, n_nodes=2, d_model=8, d_ff=16)
    tok, present = _tokens(2, 6, pol.slot_in.in_features)
    with pytest.raises(ValueError, match="M=2, K=4 only"):
        pol.act(tok, present)


def _suite_recipe(suite: list):
    """The mat=suite recipe with ``suite`` as its imitation suite, parsed."""
    from omegaconf import OmegaConf

    from mara.train_settings import load_recipe, mat_settings

    cfg = load_recipe("suite")
    cfg.imitation.suite = OmegaConf.create(suite)
    return mat_settings(cfg)


def test_suite_settings_loads_and_sim():
    from mara.mat.suite import scaled_loads, setting_sim, suite_settings
    from mara.sim.settings import SimSettings

    im = _suite_recipe(
        [
            {"nodes": 14, "max_active": 20},
            {"nodes": 3, "max_active": 5, "node_speed": [2, 1, 1], "switch_cost": 2, "teacher": "Slack-QR"},
        ]
    ).imitation
    s = suite_settings(im, "Slack-QR-q")
    assert [x.teacher for x in s] == ["Slack-QR-q", "Slack-QR"] and s[1].node_speed == (2, 1, 1)
    assert im.recorded()["suite"][0] == {"nodes": 14, "max_active": 20}  # the checkpoint records the suite as given
    assert scaled_loads([0.04, 0.07], 14) == pytest.approx([0.08, 0.14]) and scaled_loads(0.5, 28) == [1.0]
    sim = SimSettings(nodes=7, max_active=10, obs_every=10, node_speed=(2,) * 7, switch_cost=1)
    assert setting_sim(sim, s[0]).recorded() == {
        "n_nodes": 14,
        "max_active": 20,
        "obs_every": 10,
        "n_steps": 500,
        "beta": 0.1,
    }
    assert setting_sim(sim, s[1]).env_options() == {"node_speed": [2, 1, 1], "switch_cost": 2}
    for bad, why in (
        ([{"nodes": 3}], "needs nodes and max_active"),
        ([{"nodes": 3, "max_active": 4, "speed": 1}], "got keys"),
        ([{"nodes": 0, "max_active": 4}], ">= 1"),
        ([{"nodes": 3, "max_active": 4, "node_speed": [1]}], "1 entries for 3"),
    ):
        with pytest.raises(ConfigError, match=why):
            _suite_recipe(bad)


def test_clone_suite_learns_settings_of_different_sizes():
    """Two settings with their own M and K, labels a fixed function of the tokens (serve the slots whose first feature
    is largest, up to M): cloning on both raises the agreement on both."""
    from mara.mat.features import n_features
    from mara.mat.imitation import agreement, clone

    torch.manual_seed(0)
    F = n_features("v3")[1]
    data = []
    for M, K in ((2, 4), (5, 9)):
        tok, present = _tokens(768, K, F, seed=K)
        score = tok[..., 0].masked_fill(~present, -1e9)
        order = score.argsort(dim=1, descending=True)[:, :M]
        ok = torch.gather(present, 1, order) & (torch.gather(tok[..., 0], 1, order) > 0)
        data.append({"tokens": tok, "present": present, "actions": torch.where(ok, order, torch.full_like(order, K))})
    pol = MATPolicy(n_slots=4, n_nodes=2, d_model=32, d_ff=64, decoder="plackett_luce", features="v3")
    before = [agreement(pol, d) for d in data]
    losses = clone(pol, data, epochs=25, lr=3e-3, batch_size=128, generator=torch.Generator().manual_seed(0))
    after = [agreement(pol, d) for d in data]
    assert losses[-1] < losses[0]
    assert all(a > 0.6 and a > b + 0.3 for a, b in zip(after, before)), (before, after)


def test_displace_placement_of_a_policy_is_slack_qr_displace():
    """A student whose picks are Slack-QR-displace's picks takes its actions (``place_policy(..., "displace")``), and
    the displacement moves tasks in some states of a heterogeneous training env (the check has teeth)."""
    from mara.allocators.placement import place_policy
    from mara.core.config import build_allocators, load_method_cfg
    from mara.curves.bank import default_bank_path, load_bank
    from mara.mat.rollout import EpisodeStream, TrainingEnv
    from mara.predictors.factory import predictor_from

    bank = load_bank(default_bank_path())
    rule = build_allocators(load_method_cfg("Slack-QR-displace"))[0][1]
    stream = EpisodeStream(bank, bank.family_params, "ID", 0.12, 100777, 8, n_steps=150)
    env = TrainingEnv(
        stream,
        bank,
        predictor_from("qr_q", bank.path),
        "dense",
        n_nodes=4,
        max_active=7,
        n_groups=1,
        node_speed=[3, 1, 1, 1],
        switch_cost=1,
    )
    moved = 0
    for _ in range(150):
        o = env.group_obs[0]
        picks, _ = rule.choose(o)
        acts = rule.act(o)
        np.testing.assert_array_equal(place_policy(o, picks, "displace"), acts)
        moved += int((place_policy(o, picks) != acts).any(axis=1).sum())
        env.step(acts)
    assert moved > 0


def test_suite_teachers_checked_against_the_policy_predictor():

    from mara.core.config import ConfigError
    from mara.predictors.factory import predictor_config
    from mara.train_settings import check_teacher_predictor, load_recipe, mat_settings

    cfg = load_recipe("suite")
    cfg.predictor = predictor_config("qr_q")
    check_teacher_predictor(mat_settings(cfg))  # Slack-QR-displace reads the head's median and upper end: as qr_q
    cfg.imitation.suite[0].teacher = "Slack-QR-q"
    cfg.predictor = predictor_config("qr")  # Slack-QR-q's 0.05 level is not in qr's band
    with pytest.raises(ConfigError, match="Slack-QR-q reads predictor 'qr_q'"):
        check_teacher_predictor(mat_settings(cfg))


def train_tiny_suite(tmp_path, recipe: str, extra: tuple = (), callbacks=None, ckpt_path=None) -> dict:
    """Training of ``recipe`` (mat=suite or a recipe built on it; ``extra``: dotlist overrides) across two small
    settings, one of them with unequal nodes and a switch cost; -> ``train_policy``'s summary."""
    from omegaconf import OmegaConf

    from mara.mat.train import train_policy
    from mara.predictors.factory import predictor_config
    from mara.train_settings import load_recipe, mat_settings

    cfg = load_recipe(recipe)
    cfg.merge_with(
        OmegaConf.from_dotlist(
            [
                f"output_dir={tmp_path / 'run'}",
                "rollout.n_episodes=8",
                "rollout.n_groups=2",
                "sim.n_steps=100",
                "imitation.n_episodes=4",
                "imitation.n_steps=25",
                "imitation.dagger_rounds=1",
                "imitation.epochs=1",
                "validation.n_episodes=1",
                "validation.baselines=false",
                *extra,
            ]
        )
    )
    cfg.predictor = predictor_config("qr_q")
    cfg.ckpt_path = ckpt_path
    cfg.imitation.suite = [
        {"nodes": 2, "max_active": 4},
        {"nodes": 3, "max_active": 5, "node_speed": [2, 1, 1], "switch_cost": 1, "teacher": "Slack-QR-displace"},
    ]
    return train_policy(mat_settings(cfg), callbacks=callbacks)


def test_suite_policy_trains_and_is_admitted_at_any_size(tmp_path):
    """Imitation-only training across two small settings writes a policy whose checkpoint says ``sizes: any``; the
    fit check admits it at a size it never saw, where it runs whole episodes; a single-size policy is refused there."""
    from omegaconf import OmegaConf

    from mara.core.config import ConfigError, load_method_cfg
    from mara.curves.bank import default_bank_path, load_bank
    from mara.eval.policy_fit import check_policy_fit
    from mara.mat.allocator import MATAllocator, read_policy_meta
    from mara.predictors.factory import predictor_from
    from mara.sim.env import BatchedEnv, run_episodes
    from mara.sim.workload import PAPER_TASK_SETS, generate_episodes

    summary = train_tiny_suite(tmp_path, "suite")
    path = summary["best_ckpt"]
    assert read_policy_meta(path)["sizes"] == "any" and len(summary["imitation"]["agreement_train"]) == 2
    sim = OmegaConf.create({"nodes": 5, "max_active": 8})
    mcfg = load_method_cfg("MARA-suite", {"ckpt_path": path})
    alloc = MATAllocator(path)
    check_policy_fit(mcfg, [alloc], sim)
    bank = load_bank(default_bank_path())
    ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], 0.06, 1000, 2, n_steps=80)
    m = run_episodes(BatchedEnv(ep, bank, n_nodes=5, max_active=8, predictor=predictor_from("qr_q", bank.path)), alloc)
    assert len(m["success_rate"]) == 2
    alloc.any_size = False  # the same network, taken for a single-size policy: refused at this size
    with pytest.raises(ConfigError, match="trained for M=7, K=10"):
        check_policy_fit(mcfg, [alloc], sim)
    # shipped form: weights and hyper-parameters only, the same actions
    from mara.ckpt_convert import convert

    small = convert(path, tmp_path / "shipped.ckpt", "mat=suite", policy_only=True)
    ckpt = torch.load(small, weights_only=True)
    assert "mat_state" not in ckpt and "optimizer_states" not in ckpt and ckpt["recipe"] == "mat=suite"
    again = run_episodes(
        BatchedEnv(ep, bank, n_nodes=5, max_active=8, predictor=predictor_from("qr_q", bank.path)),
        MATAllocator(str(small)),
    )
    np.testing.assert_array_equal(again["success_rate"], m["success_rate"])


def test_ppo_steps_every_setting_in_turn_and_resumes(tmp_path):
    """PPO across the suite (mat=suite_ppo): iteration i collects its rollout on setting i mod S, validation scores
    every setting (the mean of their rates), and a run resumed from last.ckpt continues the turn and every setting's
    episode stream where they were."""
    import lightning as L

    from mara.mat.suite import rollout_setting

    assert [rollout_setting(i, 3) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]

    class Clusters(L.Callback):
        seen: list = []

        def on_train_batch_end(self, trainer, pl_module, *args):
            env = pl_module.env
            self.seen.append((env.n_nodes, env.episode_stream.counter))

    # 8 episodes × 32 steps = 256 env steps per iteration: 3 iterations, validated after each
    extra = ("total_env_steps=700", "ppo.value_warmup_iterations=1", "validation.every_n_iterations=1")
    summary = train_tiny_suite(tmp_path, "suite_ppo", extra, callbacks=[Clusters()])
    assert [n for n, _ in Clusters.seen] == [2, 3, 2]
    assert all(
        len(h["val_settings"]) == 2 and h["val_success_rate"] == pytest.approx(np.mean(h["val_settings"]))
        for h in summary["history"]
    )
    ckpt = torch.load(summary["last_ckpt"], weights_only=True)
    assert len(ckpt["mat_state"]["suite_envs"]) == 1
    counters = {n: c for n, c in Clusters.seen}
    Clusters.seen = []
    train_tiny_suite(
        tmp_path,
        "suite_ppo",
        ("total_env_steps=1400", *extra[1:]),
        callbacks=[Clusters()],
        ckpt_path=summary["last_ckpt"],
    )
    assert [n for n, _ in Clusters.seen][:2] == [3, 2]  # iteration 3 is setting 1's turn
    assert Clusters.seen[0][1] >= counters[3] and Clusters.seen[1][1] >= counters[2]


def test_ppo_starts_from_a_given_policy_instead_of_the_imitation(tmp_path):
    """``mat.init_from``: PPO starts from a trained policy's weights, no imitation; during the head-only value
    warm-up nothing but the value head moves. A policy of another network is one CheckpointError line, before work."""
    from mara.core.safe_load import CheckpointError
    from mara.mat.allocator import policy_weights, read_policy_checkpoint

    first = train_tiny_suite(tmp_path / "a", "suite", ("total_env_steps=0",))
    extra = ("total_env_steps=200", "ppo.value_warmup_iterations=5", f"init_from={first['best_ckpt']}")
    second = train_tiny_suite(tmp_path / "b", "suite_ppo", extra)
    assert "imitation" not in second
    before, after = (policy_weights(read_policy_checkpoint(x)) for x in (first["best_ckpt"], second["last_ckpt"]))
    moved = sorted({k.split(".")[0] for k in before if not torch.equal(before[k], after[k])})
    assert moved == ["value_head"]
    with pytest.raises(CheckpointError, match="mat.net differs in \\['d_model'"):
        train_tiny_suite(tmp_path / "c", "suite_ppo", (*extra, "net.d_model=16"))


def test_suite_rollout_or_validation_without_a_suite_is_a_config_error():

    from mara.core.config import ConfigError
    from mara.mat.train import validation_settings
    from mara.train_settings import load_recipe, mat_settings

    cfg = load_recipe("suite_ppo")
    sets = validation_settings(mat_settings(cfg))
    assert [s.sim.nodes for s in sets] == [7, 2, 4, 10, 16, 7, 7, 7]
    assert [round(s.load, 4) for s in sets[:3]] == [0.06, round(0.06 * 2 / 7, 4), round(0.06 * 4 / 7, 4)]
    assert sets[5].sim.env_options() == {"node_speed": [2, 2, 1, 1, 1, 1, 1], "switch_cost": 2}
    cfg.imitation.suite = []
    with pytest.raises(ConfigError, match="mat.rollout.suite=true needs"):
        mat_settings(cfg)
    cfg.rollout.suite = False
    with pytest.raises(ConfigError, match="mat.validation.suite=true needs"):
        mat_settings(cfg)


@pytest.mark.ddp
def test_ppo_across_the_suite_on_two_processes(tmp_path):
    """PPO across the suite under DDP (2 CPU processes, gloo): every rank steps the same setting each iteration, so
    the all-reduced gradients are of one cluster's batch; the ranks end with the same weights, having seen other
    episodes, and the checkpoint chosen on every setting's validation exists."""
    from tests.test_mat_train import _RanksAgreeOnSuite

    extra = (
        "total_env_steps=1400",
        "ppo.value_warmup_iterations=1",
        "validation.every_n_iterations=1",
        "trainer.devices=2",
        "trainer.strategy=ddp_spawn",
    )
    summary = train_tiny_suite(tmp_path, "suite_ppo", extra, callbacks=[_RanksAgreeOnSuite()])
    assert summary["env_steps"] >= 1400 and summary["best_ckpt"]
    assert all(len(h["val_settings"]) == 2 for h in summary["history"])
