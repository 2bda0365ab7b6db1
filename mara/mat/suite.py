"""One policy for many clusters: imitation across a suite of settings (``mat.imitation.suite``).

A setting is a cluster — M nodes, K admission slots, optionally node speeds and a switch cost — with the teacher
that is best there (chosen on validation roots, docs/allocators.md). The Plackett–Luce policy has no node or slot
positions (mara/mat/nets.py), and its v3 tokens describe the cluster (node profile, switch cost, M/K in the global
features; mara/mat/features.py), so one network can act in every setting and read which one it is in. Training
collects the teacher's labels in each setting (behaviour cloning, then DAgger rounds on the student's own states, as
``mara.mat.imitation.imitate``) and fits one network to all of them; each minibatch comes from one setting (its M
and K fix the shapes), minibatches of all settings shuffled together.

Loads: each setting's episodes arrive at ``load × M / 7`` (the paper's loads per node of its 7 nodes), so a larger
cluster sees the same pressure per node.

PPO across the suite (``mat.rollout.suite``; mara/mat/module.py) steps the same settings, one per iteration in turn
(``rollout_setting``), and validates on every one of them (mara/mat/callback.py).

Pure pieces: ``suite_settings`` (the configured suite → its clusters), ``setting_sim`` (a setting's cluster),
``scaled_loads`` (mara/mat/settings.py), ``rollout_setting``.
"""

from __future__ import annotations

import time

import torch

from mara.mat.features import token_options
from mara.mat.imitation import (
    agreement,
    clone,
    collect_labelled_states,
    merge,
    node_agreement,
    round_line,
)
from mara.mat.nets import MATPolicy
from mara.mat.settings import ImitationSettings, SuiteSetting, scaled_loads, setting_sim  # noqa: F401  (re-exported)


def suite_settings(imitation: ImitationSettings, default_teacher: str) -> list[SuiteSetting]:
    """The clusters of ``mat.imitation.suite``, each with its teacher (``default_teacher`` where it names none)."""
    return imitation.settings(default_teacher)


def rollout_setting(iteration: int, n_settings: int) -> int:
    """The setting PPO iteration ``iteration`` collects its rollout in: the settings in turn, each the same share."""
    return iteration % max(n_settings, 1)


def imitate_suite(
    policy: MATPolicy,
    settings: list[SuiteSetting],
    make_env,
    teachers: dict,
    cfg: ImitationSettings,
    seed: int = 0,
    scale: float = 350.0,
    log=print,
) -> dict:
    """BC on every setting's teacher rollouts, then ``cfg.dagger_rounds`` DAgger rounds in every setting; trains
    ``policy`` in place. ``make_env(setting, r)`` -> a fresh ``TrainingEnv`` of that setting for round r;
    ``teachers``: teacher name -> teacher. Returns per round the states, loss and per-setting agreement (on the
    round's data, and on its fresh states before training)."""
    if policy.decoder != "plackett_luce":
        raise ValueError("mat.imitation.suite needs mat.net.decoder=plackett_luce (a network without node positions)")
    g = torch.Generator().manual_seed(seed)
    data: list[dict | None] = [None] * len(settings)
    report, t0 = {"settings": [s.report() for s in settings], "rounds": []}, time.time()
    for r in range(1 + cfg.dagger_rounds):
        held_out = []
        for i, s in enumerate(settings):
            new = collect_labelled_states(
                make_env(s, r),
                teachers[s.teacher],
                cfg.n_steps,
                None if r == 0 else policy,
                scale,
                policy.features,
                token_options(policy),
                policy.node_head,
            )
            held_out.append(agreement(policy, new) if r > 0 else None)
            data[i] = merge(data[i], new)
        losses = clone(policy, data, cfg.epochs, float(cfg.lr), cfg.batch_size, g)
        rec = {
            "round": r,
            "states": sum(len(d["actions"]) for d in data),
            "loss": losses[-1],
            "agreement_train": [agreement(policy, d) for d in data],
            "agreement_new_before_training": held_out,
            "node_agreement_train": [node_agreement(policy, d) for d in data],
            "seconds": time.time() - t0,
        }
        report["rounds"].append(rec)
        log(round_line("suite imitation", rec, 1 + cfg.dagger_rounds))
    report["agreement_train"] = report["rounds"][-1]["agreement_train"]
    return report
