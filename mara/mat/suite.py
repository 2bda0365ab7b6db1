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

Pure pieces: ``suite_settings`` (config → settings), ``setting_sim`` (a setting's simulator keys), ``scaled_loads``,
``rollout_setting``.
"""
from __future__ import annotations

import time

import torch

from mara.mat.features import token_options
from mara.mat.imitation import (
    agreement,
    clone_step,
    collect_labelled_states,
    merge,
    node_agreement,
    round_line,
)
from mara.mat.nets import MATPolicy

PAPER_NODES = 7  # the loads of the paper's protocol are per step on its 7 nodes


def scaled_loads(load, n_nodes: int) -> list[float]:
    """The workload's load(s) at the same pressure per node on ``n_nodes`` nodes (``load × M / 7``, at most 1)."""
    loads = [load] if isinstance(load, (int, float)) else list(load)
    return [min(float(p) * n_nodes / PAPER_NODES, 1.0) for p in loads]


def suite_settings(imitation: dict, default_teacher: str) -> list[dict]:
    """The ``suite`` list of ``mat.imitation`` as settings ``{n_nodes, max_active, node_speed, switch_cost,
    teacher}``; a one-line ValueError for a setting that is not one."""
    out = []
    for i, s in enumerate(imitation.get("suite") or []):
        s = dict(s)
        unknown = set(s) - {"nodes", "max_active", "node_speed", "switch_cost", "teacher"}
        if unknown or "nodes" not in s or "max_active" not in s:
            raise ValueError(f"mat.imitation.suite[{i}] needs nodes and max_active (and optionally node_speed, "
                             f"switch_cost, teacher); got keys {sorted(s)}")
        m, k = int(s["nodes"]), int(s["max_active"])
        if m < 1 or k < 1:
            raise ValueError(f"mat.imitation.suite[{i}]: nodes and max_active must be >= 1, got {m}, {k}")
        speed = s.get("node_speed")
        if speed is not None and len(speed) != m:
            raise ValueError(f"mat.imitation.suite[{i}]: node_speed has {len(speed)} entries for {m} nodes")
        out.append({"n_nodes": m, "max_active": k, "node_speed": None if speed is None else [int(x) for x in speed],
                    "switch_cost": int(s.get("switch_cost") or 0), "teacher": str(s.get("teacher") or default_teacher)})
    return out


def rollout_setting(iteration: int, n_settings: int) -> int:
    """The setting PPO iteration ``iteration`` collects its rollout in: the settings in turn, each the same share."""
    return iteration % max(n_settings, 1)


def setting_sim(sim: dict, setting: dict) -> dict:
    """The training ``sim`` keys with a setting's cluster in place of the training cluster."""
    out = {k: v for k, v in sim.items() if k not in ("node_speed", "switch_cost")}
    out.update(n_nodes=setting["n_nodes"], max_active=setting["max_active"])
    if setting["node_speed"] is not None or setting["switch_cost"]:
        out.update(node_speed=setting["node_speed"], switch_cost=setting["switch_cost"])
    return out


def clone_suite(policy: MATPolicy, datasets: list[dict], epochs: int, lr: float, batch_size: int,
                generator: torch.Generator, max_grad_norm: float = 1.0) -> list[float]:
    """Behaviour cloning on several settings' data: −log π(teacher's joint action | state), each minibatch from one
    setting, every setting's minibatches shuffled together per epoch. -> mean loss per epoch."""
    opt = torch.optim.Adam(policy.parameters(), lr=lr, eps=1e-5)
    policy.train()
    n_all = sum(len(d["actions"]) for d in datasets)
    losses = []
    for _ in range(epochs):
        batches = [(i, idx) for i, d in enumerate(datasets)
                   for idx in torch.split(torch.randperm(len(d["actions"]), generator=generator), batch_size)]
        tot = 0.0
        for j in torch.randperm(len(batches), generator=generator).tolist():
            i, idx = batches[j]
            tot += clone_step(policy, opt, datasets[i], idx, max_grad_norm)
        losses.append(tot / max(n_all, 1))
    return losses


def imitate_suite(policy: MATPolicy, settings: list[dict], make_env, teachers: dict, cfg: dict, seed: int = 0,
                  scale: float = 350.0, log=print) -> dict:
    """BC on every setting's teacher rollouts, then ``cfg['dagger_rounds']`` DAgger rounds in every setting; trains
    ``policy`` in place. ``make_env(setting, r)`` -> a fresh ``TrainingEnv`` of that setting for round r;
    ``teachers``: teacher name -> teacher. Returns per round the states, loss and per-setting agreement (on the
    round's data, and on its fresh states before training)."""
    if policy.decoder != "plackett_luce":
        raise ValueError("mat.imitation.suite needs mat.net.decoder=plackett_luce (a network without node positions)")
    g = torch.Generator().manual_seed(seed)
    data: list[dict | None] = [None] * len(settings)
    report, t0 = {"settings": settings, "rounds": []}, time.time()
    for r in range(1 + int(cfg["dagger_rounds"])):
        held_out = []
        for i, s in enumerate(settings):
            new = collect_labelled_states(make_env(s, r), teachers[s["teacher"]], int(cfg["n_steps"]),
                                          None if r == 0 else policy, scale, policy.features, token_options(policy),
                                          policy.node_head)
            held_out.append(agreement(policy, new) if r > 0 else None)
            data[i] = merge(data[i], new)
        losses = clone_suite(policy, data, int(cfg["epochs"]), float(cfg["lr"]), int(cfg["batch_size"]), g)
        rec = {"round": r, "states": sum(len(d["actions"]) for d in data), "loss": losses[-1],
               "agreement_train": [agreement(policy, d) for d in data], "agreement_new_before_training": held_out,
               "node_agreement_train": [node_agreement(policy, d) for d in data],
               "seconds": time.time() - t0}
        report["rounds"].append(rec)
        log(round_line("suite imitation", rec, 1 + int(cfg["dagger_rounds"])))
    report["agreement_train"] = report["rounds"][-1]["agreement_train"]
    return report
