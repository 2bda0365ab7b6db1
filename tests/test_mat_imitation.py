"""Imitation warm start (mara/mat/imitation.py) and the validation-only checkpoint rule."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from mara.mat.imitation import (
    agreement,
    clone,
    collect_labelled_states,
    served_sets_equal,
    teacher_choices,
)
from mara.mat.nets import MATPolicy
from mara.mat.train import train_policy
from mara.train_settings import load_recipe, mat_settings

torch.set_num_threads(1)


def test_teacher_choices_and_served_sets():
    a = teacher_choices(np.array([[3, 0, -1], [-1, -1, -1]]), n_slots=5)
    assert a.tolist() == [[3, 0, 5], [5, 5, 5]]
    b = torch.tensor([[0, 3, 5], [5, 5, 5]])
    c = torch.tensor([[0, 4, 5], [2, 5, 5]])
    assert served_sets_equal(a, b, 5).tolist() == [True, True]  # node order is irrelevant
    assert served_sets_equal(a, c, 5).tolist() == [False, False]


def _small_env(bank, root, E=16):
    from mara.mat.rollout import EpisodeStream, TrainingEnv
    from mara.predictors.baselines.wls import WLSPredictor

    stream = EpisodeStream(bank, bank.family_params, "ID", 0.1, root, E, n_steps=150)
    return TrainingEnv(stream, bank, WLSPredictor(), "dense", n_nodes=3, max_active=5, n_groups=2, stagger=40)


def test_cloning_reproduces_the_slack_teacher():
    """Stated rate, on contested states (more tasks present than nodes, where the choice matters): after cloning,
    the argmax policy serves exactly the teacher's set of slots on ≥ 85 % of its training states and on ≥ 75 % of
    fresh states of unseen episodes; the untrained policy is far below."""
    from mara.allocators.slack import SlackRule
    from mara.curves.bank import default_bank_path, load_bank

    bank = load_bank(default_bank_path())
    torch.manual_seed(0)
    policy = MATPolicy(n_slots=5, n_nodes=3, d_model=32, d_ff=64, idle_bias=-2.0)
    contested = lambda d: {k: v[d["present"].sum(1) > 3] for k, v in d.items()}  # noqa: E731
    data = contested(collect_labelled_states(_small_env(bank, 100123), SlackRule(), 150))
    fresh = contested(collect_labelled_states(_small_env(bank, 100456), SlackRule(), 150))
    assert len(data["actions"]) > 300 and len(fresh["actions"]) > 300
    before = agreement(policy, data)
    clone(policy, data, epochs=30, lr=2e-3, batch_size=256, generator=torch.Generator().manual_seed(0))
    after, held_out = agreement(policy, data), agreement(policy, fresh)
    assert before < 0.5, before
    assert after >= 0.85, after
    assert held_out >= 0.75, held_out


def tiny_cfg(tmp_path, **over):
    cfg = load_recipe("band")
    cfg.merge_with_dotlist(
        [
            f"output_dir={tmp_path / 'run'}",
            "predictor=null",
            "total_env_steps=256",
            "sim.n_nodes=3",
            "sim.max_active=5",
            "sim.n_steps=100",
            "workload.load=0.06",
            "rollout.n_episodes=8",
            "rollout.n_steps=16",
            "rollout.n_groups=4",
            "rollout.stagger=25",
            "ppo.update_epochs=2",
            "ppo.n_minibatches=2",
            "validation.roots=[1000,1003]",
            "validation.n_episodes=2",
            "validation.every_n_iterations=1",
            "validation.baselines=false",
            "validation.at_start=true",
            "net.d_model=16",
            "net.d_ff=32",
            "imitation.enabled=true",
            "imitation.n_episodes=8",
            "imitation.n_steps=40",
            "imitation.stagger=20",
            "imitation.dagger_rounds=1",
            "imitation.epochs=2",
            "ppo.value_warmup_iterations=1",
        ]
    )
    cfg.merge_with_dotlist([f"{k}={v}" for k, v in over.items()])
    return cfg


def test_checkpoint_selection_reads_validation_roots_only(tmp_path, monkeypatch):
    """Every episode the training run generates (training stream, imitation rounds, validation) records its root;
    none may be an evaluation root 0–4, and validation (the only input to checkpoint selection) uses exactly the
    configured validation roots."""
    import mara.mat.callback as callback
    import mara.mat.rollout as rollout

    seen = {"validation": [], "training": []}

    def spy(kind, fn):
        def wrapped(bank, fp, ts, load, root, *a, **kw):
            seen[kind].append(int(root))
            return fn(bank, fp, ts, load, root, *a, **kw)

        return wrapped

    monkeypatch.setattr(callback, "generate_episodes", spy("validation", callback.generate_episodes))
    monkeypatch.setattr(rollout, "generate_episodes", spy("training", rollout.generate_episodes))
    r = train_policy(mat_settings(tiny_cfg(tmp_path)))
    assert sorted(set(seen["validation"])) == [1000, 1003]
    assert seen["training"] and not set(seen["training"]) & set(range(5))
    assert not set(seen["training"]) & {1000, 1003}
    hist = json.loads((Path(r["output_dir"]) / "checkpoints" / "validation.json").read_text())["history"]
    assert hist[0]["iteration"] == 0 and len(hist) >= 2  # the cloned policy is a candidate (iteration 0)
    assert r["best_iteration"] == max(hist, key=lambda h: (h["val_success_rate"], -h["iteration"]))["iteration"]
    assert (Path(r["output_dir"]) / "checkpoints" / "imitation.json").exists()
    with pytest.raises(ValueError, match="overlap the evaluation roots"):
        train_policy(mat_settings(tiny_cfg(tmp_path / "bad", **{"validation.roots": "[1000,3]"})))


def test_an_imitation_round_is_logged_as_a_line_for_people():
    from mara.mat.imitation import round_line

    rec = {
        "round": 1,
        "states": 12000,
        "new_states": 3000,
        "loss": 0.41234,
        "agreement_train": 0.9312,
        "agreement_new_before_training": 0.88,
        "seconds": 40.0,
    }
    line = round_line("imitation", rec, 4)
    assert line == (
        "imitation round 2/4: 12,000 states (+3,000 new), loss 0.412, agreement 93.1 % on its data, "
        "88.0 % on the new states before training; 40 s, about 40 s left"
    )
    suite = {
        "round": 0,
        "states": 500,
        "loss": 1.0,
        "agreement_train": [0.5, 0.25],
        "agreement_new_before_training": [None, None],
        "node_agreement_train": [None, None],
        "seconds": 3.0,
    }
    assert round_line("suite imitation", suite, 1) == (
        "suite imitation round 1/1: 500 states, loss 1.000, agreement 50.0 / 25.0 % on its data; 3 s, about 0 s left"
    )
    assert "{" not in line and "{" not in round_line("suite imitation", suite, 1)
