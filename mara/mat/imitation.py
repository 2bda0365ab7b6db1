"""Imitation warm start for the MAT policy: behaviour cloning of a rule teacher, then DAgger.

The teacher is any allocator (default: the least-slack rule ``SlackRule`` reading the same frozen predictor
as MAT). Its env actions ``[E, M]`` (slot per node in its priority order, IDLE after) become MAT choices
``0..K`` (K = idle), and the loss is the teacher-forced negative log-likelihood of the whole joint action
(``MATPolicy.evaluate``), so node i learns the teacher's i-th pick given picks 0..i-1.

DAgger rounds roll the *student* (argmax) through fresh training episodes and label every visited state
with the teacher's action; the data set is aggregated and the student retrained on all of it.

Heterogeneous nodes / switch costs: the labels are the teacher's picks in priority order *before* its
node placement (``choose`` of the rules); the student's picks are placed by the same placement
(``mara.allocators.placement.place_policy``), so a student that reproduces the picks reproduces the teacher's actions
(the median estimate is the demand both place by: exact for the Slack rules, tested). On the paper's nodes picks and
actions are the same. The env is stepped with the placed actions (the teacher's own ``act``, its displacement move
included). A student with a node head (``mat.net.node_head``, mara/mat/node_choice.py) places its picks itself: it
is also labelled with the teacher's placed actions, and its loss adds their log-likelihood given the teacher's picks.

Pure pieces: ``teacher_choices`` (env actions → choices), ``served_sets_equal`` (agreement metric: same set
of served slots, node order irrelevant since nodes are identical).
"""

from __future__ import annotations

import time

import numpy as np
import torch

from mara.core.config import build_allocators, load_method_cfg
from mara.mat import node_choice
from mara.mat.allocator import policy_env_actions
from mara.mat.features import token_options
from mara.mat.nets import MATPolicy
from mara.mat.rollout import TrainingEnv
from mara.mat.settings import ImitationSettings
from mara.predictors.baselines.truth import true_remaining_batches


def teacher_choices(env_actions: np.ndarray, n_slots: int) -> torch.Tensor:
    """Env actions [E, M] (slot or IDLE = -1) -> MAT choices [E, M] long in 0..K (K = idle)."""
    a = np.asarray(env_actions).astype(np.int64).copy()
    a[a < 0] = n_slots
    return torch.as_tensor(a)


def served_sets_equal(a: torch.Tensor, b: torch.Tensor, n_slots: int) -> torch.Tensor:
    """Per row: do choice vectors a, b [B, M] serve the same set of slots? -> [B] bool."""
    oa = torch.nn.functional.one_hot(a, n_slots + 1)[..., :n_slots].sum(1)
    ob = torch.nn.functional.one_hot(b, n_slots + 1)[..., :n_slots].sum(1)
    return (oa == ob).all(dim=1)


@torch.no_grad()
def collect_labelled_states(
    env: TrainingEnv,
    teacher,
    n_steps: int,
    student: MATPolicy | None = None,
    scale: float = 350.0,
    feature_set: str = "v1",
    options: dict | None = None,
    node_labels: bool = False,
) -> dict[str, torch.Tensor]:
    """Step ``env`` ``n_steps`` times acting with ``student`` (argmax) or, when None, the teacher; record
    every live state's tokens (``options``: ``obs_to_tokens``'s q / band, ``token_options(policy)``), present mask
    and the teacher's choices. ``node_labels`` on unequal nodes / with switch costs (a policy with a node head): also
    the pair features, the teacher's placed actions as node actions and the nodes' choosing order
    (mara/mat/node_choice.py). -> dict of [B, ...] tensors."""
    toks, pres, acts, pairs, nodes = [], [], [], [], []
    node_labels = node_labels and bool(env.group_obs[0].hetero)
    n = env.episode_stream.E // env.n_groups
    for _ in range(n_steps):
        tok, p = env.tokens(scale, feature_set, **(options or {}))
        picks, teach = teacher_labels(teacher, env)
        live = torch.as_tensor(np.concatenate([~o.done for o in env.group_obs]))
        if student is None:
            act = teach
        else:
            act = np.concatenate(
                [
                    policy_env_actions(student, o, tok[g * n : (g + 1) * n], p[g * n : (g + 1) * n], scale)
                    for g, o in enumerate(env.group_obs)
                ]
            )
        toks.append(tok[live]), pres.append(p[live]), acts.append(teacher_choices(picks, tok.shape[1])[live])
        if node_labels:
            pairs.append(
                torch.as_tensor(np.concatenate([node_choice.pair_features(o, scale) for o in env.group_obs]))[live]
            )
            nodes.append(node_choice.placed_choices(teach, tok.shape[1])[live])
        env.step(act)
    assert n > 0
    out = {"tokens": torch.cat(toks), "present": torch.cat(pres), "actions": torch.cat(acts)}
    if node_labels:
        order = torch.as_tensor(node_choice.node_order(env.group_obs[0].node_speed))
        out.update(pairs=torch.cat(pairs), nodes=torch.cat(nodes), order=order.expand(len(out["actions"]), -1).clone())
    return out


class TruthTeacher:
    """A privileged DAgger teacher: ``rule`` acting on the *true* remaining batches of the
    simulator's state — Slack-Truth when ``rule`` is the least-slack rule. Only the labels see the truth; the
    student's tokens are built from the ordinary observation (the estimates of MAT's own predictor). Same timing
    as the ``truth`` predictor: a task is cold (no estimate) before its 4th observation."""

    privileged = True

    def __init__(self, rule) -> None:
        self.rule = rule
        self.name = f"{getattr(rule, 'name', 'rule')}(truth labels)"

    @staticmethod
    def truth_observation(env):
        """The env's current observation with the estimate (and band) replaced by ``need − processed``."""

        o = env.observe()
        truth = true_remaining_batches(env.slot_need, env.slot_s, np.maximum(env.slot_cap - env.slot_s, 0))
        nodes = (
            dict(
                node_speed=o._node_speed,
                switch_cost=o.switch_cost,
                last_node=o._last_node,
                started=o._started,
                setup_left=o._setup_left,
            )
            if o.hetero
            else {}
        )
        return type(o)(
            o.t,
            env.slot_task.copy(),
            env.slot_s.copy(),
            env.slot_arrival.copy(),
            env.slot_deadline.copy(),
            env.slot_cap.copy(),
            truth,
            env.slot_s.copy(),
            o.n_queued,
            o.done,
            o.n_nodes,
            o.max_active,
            env.obs_every,
            slot_pred_lo=truth,
            slot_pred_hi=truth,
            **nodes,
        )

    def act_env(self, env) -> np.ndarray:
        return self.rule.act(self.truth_observation(env))

    def choose_env(self, env) -> tuple[np.ndarray, np.ndarray]:
        """(picks before placement, placed actions) on the truth observation."""
        o = self.truth_observation(env)
        if not hasattr(self.rule, "choose"):
            a = self.rule.act(o)
            return a, a
        picks, _ = self.rule.choose(o)
        return picks, self.rule.act(o)


def build_teacher(name: str):
    """The imitation teacher named in config (``mat.imitation.teacher``, a conf/method name). A method whose
    predictor is the ``truth`` bound (Slack-Truth) becomes a ``TruthTeacher``: labels from the true remaining
    batches, read from the simulator — never from the student's tokens."""

    cfg = load_method_cfg(name)
    rule = build_allocators(cfg)[0][1]
    return TruthTeacher(rule) if cfg.get("predictor") == "truth" else rule


def teacher_actions(teacher, env: TrainingEnv) -> np.ndarray:
    """The teacher's env actions for every episode of ``env``'s groups, stacked -> [E, M]."""
    return teacher_labels(teacher, env)[1]


def teacher_labels(teacher, env: TrainingEnv) -> tuple[np.ndarray, np.ndarray]:
    """(the teacher's picks in priority order before node placement, its placed env actions), every episode of
    ``env``'s groups stacked -> ([E, M], [E, M]); the same arrays on identical nodes. A teacher without ``choose``
    (not a rule of mara/allocators) is labelled with its actions."""
    if getattr(teacher, "privileged", False):
        out = [teacher.choose_env(e) for e in env.envs]
    elif hasattr(teacher, "choose"):
        out = [(teacher.choose(o)[0], teacher.act(o)) for o in env.group_obs]  # act: its own placement (displacement)
    else:
        out = [(a, a) for a in (teacher.act(o) for o in env.group_obs)]
    return np.concatenate([p for p, _ in out]), np.concatenate([a for _, a in out])


def merge(a: dict | None, b: dict) -> dict:
    return b if a is None else {k: torch.cat([a[k], b[k]]) for k in a}


def clone(
    policy: MATPolicy,
    data: dict | list[dict],
    epochs: int,
    lr: float,
    batch_size: int,
    generator: torch.Generator,
    max_grad_norm: float = 1.0,
) -> list[float]:
    """Behaviour cloning: minimise −log π(teacher joint action | state) over ``data``. Returns mean loss per epoch.
    ``data``: one setting's states, or a list of several settings' states: then each minibatch comes from one
    setting and every setting's minibatches are shuffled together per epoch."""
    if isinstance(data, dict):
        n = len(data["actions"])

        def minibatches():
            return ((data, idx) for idx in torch.split(torch.randperm(n, generator=generator), batch_size))

    else:
        n = max(sum(len(d["actions"]) for d in data), 1)

        def minibatches():
            batches = [
                (d, idx)
                for d in data
                for idx in torch.split(torch.randperm(len(d["actions"]), generator=generator), batch_size)
            ]
            return [batches[j] for j in torch.randperm(len(batches), generator=generator).tolist()]

    return clone_epochs(policy, epochs, lr, max_grad_norm, minibatches, n)


def clone_epochs(policy: MATPolicy, epochs: int, lr: float, max_grad_norm: float, minibatches, n: int) -> list[float]:
    """The behaviour-cloning loop: Adam over ``epochs`` epochs of ``minibatches()`` (``(data, idx)`` pairs, drawn
    afresh per epoch), each a :func:`clone_step`. -> mean loss per epoch over ``n`` states."""
    opt = torch.optim.Adam(policy.parameters(), lr=lr, eps=1e-5)
    policy.train()
    losses = []
    for _ in range(epochs):
        tot = 0.0
        for d, idx in minibatches():
            tot += clone_step(policy, opt, d, idx, max_grad_norm)
        losses.append(tot / n)
    return losses


def clone_step(policy: MATPolicy, opt, data: dict, idx: torch.Tensor, max_grad_norm: float) -> float:
    """One minibatch ``idx`` of ``data``: a gradient step on −log π(teacher's joint action | state); -> summed loss."""
    dev = next(policy.parameters()).device
    if "nodes" in data and getattr(policy, "node_head", False):  # picks and the teacher's placement of them
        tokens, present, picks, pairs, nodes = (
            data[k][idx].to(dev) for k in ("tokens", "present", "actions", "pairs", "nodes")
        )
        logp = policy.evaluate_nodes(tokens, present, picks, pairs, nodes, data["order"][idx[0]])[0]
    else:
        logp, _, _ = policy.evaluate(*(data[k][idx].to(dev) for k in ("tokens", "present", "actions")))
    loss = -logp.mean()
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), max_grad_norm)
    opt.step()
    return float(loss.detach()) * len(idx)


@torch.no_grad()
def agreement(policy: MATPolicy, data: dict, batch_size: int = 4096) -> float:
    """Fraction of states where the argmax policy serves exactly the teacher's set of slots."""
    policy.eval()
    hits = 0
    for s in range(0, len(data["actions"]), batch_size):
        sl = slice(s, s + batch_size)
        dev = next(policy.parameters()).device
        a, _, _ = policy.act(
            data["tokens"][sl].to(dev),
            data["present"][sl].to(dev),
            deterministic=True,
            n_nodes=data["actions"].shape[1],
        )
        hits += int(served_sets_equal(a.cpu(), data["actions"][sl], data["tokens"].shape[1]).sum())
    policy.train()
    return hits / max(len(data["actions"]), 1)


@torch.no_grad()
def node_agreement(policy: MATPolicy, data: dict, batch_size: int = 4096) -> float | None:
    """Fraction of states where the argmax policy with a node head places exactly as the teacher did (every node the
    teacher's task or idle), given the teacher's picks; None for data without node labels."""
    if "nodes" not in data or not getattr(policy, "node_head", False):
        return None
    policy.eval()
    hits, dev, order = 0, next(policy.parameters()).device, data["order"][0]
    for s in range(0, len(data["actions"]), batch_size):
        tok, pres, picks, pairs, nodes = (
            data[k][s : s + batch_size].to(dev) for k in ("tokens", "present", "actions", "pairs", "nodes")
        )
        _, _, slot_mem = policy.encode_scores(tok, pres, with_slots=True)
        chosen, rank = node_choice.chosen_ranks(picks, pres.shape[1])
        got = node_choice.decode(policy.node_logits(slot_mem, pairs, chosen, rank), chosen, order)
        hits += int((got == nodes).all(dim=1).sum())
    policy.train()
    return hits / max(len(data["actions"]), 1)


def _percent(value) -> str:
    """An agreement (a share, a list of shares per setting, or None) as percent for a log line."""
    if value is None or (isinstance(value, list) and all(v is None for v in value)):
        return "–"
    if isinstance(value, list):
        return " / ".join("–" if v is None else f"{100 * v:.1f}" for v in value) + " %"
    return f"{100 * value:.1f} %"


def round_line(what: str, rec: dict, n_rounds: int) -> str:
    """One log line for a person about an imitation round ``rec`` (its report entry): progress, the data, the loss,
    the agreements (per setting for a suite) and the time left at this round's pace."""
    r, seconds = int(rec["round"]), float(rec["seconds"])
    left = seconds / (r + 1) * (n_rounds - r - 1)
    new = f" (+{rec['new_states']:,} new)" if "new_states" in rec else ""
    line = (
        f"{what} round {r + 1}/{n_rounds}: {rec['states']:,} states{new}, loss {rec['loss']:.3f}, "
        f"agreement {_percent(rec['agreement_train'])} on its data"
    )
    if r > 0:
        line += f", {_percent(rec['agreement_new_before_training'])} on the new states before training"
    if rec.get("node_agreement_train") is not None and any(v is not None for v in rec["node_agreement_train"]):
        line += f", node placement {_percent(rec['node_agreement_train'])}"
    return line + f"; {seconds:.0f} s, about {left:.0f} s left"


def imitate(
    policy: MATPolicy, make_env, teacher, cfg: ImitationSettings, seed: int = 0, scale: float = 350.0, log=print
) -> dict:
    """BC on teacher rollouts, then ``cfg.dagger_rounds`` DAgger rounds; trains ``policy`` in place.

    ``make_env(i)`` returns a fresh ``TrainingEnv`` on training episodes for round i. Returns a report with
    the per-round data size, loss and agreement on the round's data (training states) and on the next round's
    fresh states (held out: collected before that round's training).
    """
    g = torch.Generator().manual_seed(seed)
    data, report, t0 = None, {"rounds": []}, time.time()
    for r in range(1 + cfg.dagger_rounds):
        new = collect_labelled_states(
            make_env(r),
            teacher,
            cfg.n_steps,
            None if r == 0 else policy,
            scale,
            getattr(policy, "features", "v1"),
            token_options(policy),
            getattr(policy, "node_head", False),
        )
        held_out = agreement(policy, new) if r > 0 else None
        data = merge(data, new)
        losses = clone(policy, data, cfg.epochs, float(cfg.lr), cfg.batch_size, g)
        rec = {
            "round": r,
            "states": len(data["actions"]),
            "new_states": len(new["actions"]),
            "loss": losses[-1],
            "agreement_train": agreement(policy, data),
            "agreement_new_before_training": held_out,
            "seconds": time.time() - t0,
        }
        report["rounds"].append(rec)
        log(round_line("imitation", rec, 1 + cfg.dagger_rounds))
    report["agreement_train"] = report["rounds"][-1]["agreement_train"]
    return report
