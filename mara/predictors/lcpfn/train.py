"""Training LC-PFN: on curves drawn from its prior (``stage=prior``), then on the bank's training curves
(``stage=finetune``, fm_train; the fm_val NLL picks the step kept).

Both stages are resumable: every ``save_every`` steps the run folder's ``state.pt`` (weights, optimiser, step, wall
time; tensors and plain values only) is written, and a rerun with the same folder continues from it. Each step's
batch is drawn from ``default_rng([seed, step])``, so a resumed run sees the batches an uninterrupted one would.
``max_cpu_s`` stops a stage early once its process has used that much CPU time (then rerun to go on); the record
holds both the CPU and the wall time. The result is ``<out>/lcpfn.ckpt`` (weights only).
CLI: ``python -m mara.predictors.lcpfn_train stage=prior|finetune [paths.output_dir=DIR] [seed=S]
[init=<prior lcpfn.ckpt>] [predictor.prior_train.steps=N] ...`` (composes conf/predictor/lcpfn.yaml under
``predictor``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Mapping

import numpy as np
import torch

from mara.core.config import ConfigError
from mara.core.safe_load import load_checkpoint
from mara.curves.bank import default_bank_path, load_bank
from mara.predictors.lcpfn.data import bank_batch, batch_nll, prior_batch
from mara.predictors.lcpfn.net import PFNTransformer, prior_borders
from mara.predictors.lcpfn.predictor import load_lcpfn, save_lcpfn
from mara.predictors.lcpfn.prior import sample_curves


@dataclass(frozen=True)
class LoopSettings:
    """One stage's schedule (``predictor.prior_train`` / ``predictor.finetune``): steps, curves per step, target points
    per curve, learning rate, warm-up, weight decay, checkpoint period, CPU seconds per call, torch threads; the prior
    stage's points per curve (``grid``) and the fine-tuning's context range (``ctx_min``, ``ctx_max_frac``)."""

    steps: int
    batch_size: int
    n_query: int
    lr: float
    warmup: int
    save_every: int
    max_cpu_s: float
    weight_decay: float = 0.0
    num_threads: int = 1
    grid: tuple[int, int] = (60, 72)
    ctx_min: int = 4
    ctx_max_frac: float = 0.6

    @classmethod
    def from_config(cls, c: Mapping, where: str) -> "LoopSettings":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(c) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown setting(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})")
        try:
            kw = {k: (tuple(int(x) for x in v) if k == "grid" else v) for k, v in c.items()}
            return cls(**kw)
        except TypeError as exc:
            raise ConfigError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class LCPFNFitSettings:
    """LC-PFN's training, parsed once from its predictor config: the network's arguments (``net``) and the two
    stages' schedules."""

    net: dict
    prior_train: LoopSettings
    finetune: LoopSettings

    @classmethod
    def from_config(cls, pc: Mapping) -> "LCPFNFitSettings":
        return cls(
            net=dict(pc["net"]),
            prior_train=LoopSettings.from_config(pc["prior_train"], "predictor.prior_train"),
            finetune=LoopSettings.from_config(pc["finetune"], "predictor.finetune"),
        )


def _rel(path) -> str:
    """``path`` relative to the repository when under it (records of shipped checkpoints hold no machine paths)."""
    root = Path(__file__).resolve().parents[3]
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _lr(step: int, total: int, lr: float, warmup: int) -> float:
    """Linear warm-up, then cosine decay to 5 % of ``lr``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return lr * (0.05 + 0.95 * 0.5 * (1.0 + math.cos(math.pi * min(frac, 1.0))))


def _loop(net, draw, tc, out: Path, seed: int, evaluate=None) -> dict:
    """The shared resumable loop: ``draw(rng)`` gives a batch; ``evaluate()`` (optional) a validation loss, the best
    weights of which are kept. Returns the run record."""
    out.mkdir(parents=True, exist_ok=True)
    opt = torch.optim.AdamW(net.parameters(), lr=float(tc.lr), weight_decay=float(tc.weight_decay))
    state_path = out / "state.pt"
    step, wall, cpu, best, best_state, history = 0, 0.0, 0.0, math.inf, None, []
    if state_path.exists():
        st = load_checkpoint(state_path, "LC-PFN training state")
        net.load_state_dict(st["net"])
        opt.load_state_dict(st["opt"])
        step, wall, cpu, best = int(st["step"]), float(st["wall_s"]), float(st["cpu_s"]), float(st["best"])
        history = list(st["history"])
        best_state = st.get("best_net")
    total, every = int(tc.steps), int(tc.save_every)
    t0, c0, g = time.time(), time.process_time(), torch.Generator()
    while step < total and cpu + (time.process_time() - c0) < float(tc.max_cpu_s):
        for grp in opt.param_groups:
            grp["lr"] = _lr(step, total, float(tc.lr), int(tc.warmup))
        g.manual_seed(seed * 1_000_003 + step)
        net.train()
        loss = batch_nll(net, draw(np.random.default_rng([seed, step])), int(tc.n_query), g)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        step += 1
        if step % every == 0 or step == total:
            rec = {"step": step, "train_nll": float(loss.detach())}
            if evaluate is not None:
                net.eval()
                with torch.no_grad():
                    rec["val_nll"] = float(evaluate())
                if rec["val_nll"] < best:
                    best, best_state = rec["val_nll"], {k: v.clone() for k, v in net.state_dict().items()}
            history.append(rec)
            print(rec, flush=True)
            torch.save(
                {
                    "net": net.state_dict(),
                    "opt": opt.state_dict(),
                    "step": step,
                    "best": best,
                    "history": history,
                    "wall_s": wall + time.time() - t0,
                    "cpu_s": cpu + time.process_time() - c0,
                    "best_net": best_state,
                },
                state_path,
            )
    wall, cpu = wall + time.time() - t0, cpu + time.process_time() - c0
    if best_state is not None:
        net.load_state_dict(best_state)
    return {
        "steps": step,
        "target_steps": total,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "best_val_nll": None if best == math.inf else best,
        "history": history,
    }


def train_prior(fit: LCPFNFitSettings, out, seed: int = 0) -> dict:
    """LC-PFN on prior curves only: borders from 2000 prior curves, ``fit.prior_train`` steps; ``out/lcpfn.ckpt``."""
    tc, nc = fit.prior_train, fit.net
    torch.manual_seed(seed)
    torch.set_num_threads(int(tc.num_threads))
    _, y, _ = sample_curves(2000, np.random.default_rng([seed, 10**6]))
    net_kw = dict(nc)
    n_buckets = int(net_kw.pop("n_buckets"))
    net = PFNTransformer(prior_borders(torch.from_numpy(y), n_buckets), **net_kw)
    grid = tuple(tc.grid)
    rec = _loop(net, lambda rng: prior_batch(int(tc.batch_size), rng, grid), tc, Path(out), seed)
    rec.update(stage="prior", seed=seed, n_params=sum(p.numel() for p in net.parameters()))
    rec["ckpt"] = str(
        save_lcpfn(
            net,
            dict(nc),
            Path(out) / "lcpfn.ckpt",
            rec,
            f"python -m mara.predictors.lcpfn_train stage=prior seed={seed}",
        )
    )
    return rec


def finetune(fit: LCPFNFitSettings, bank, init, out, seed: int = 0) -> dict:
    """The prior-trained LC-PFN ``init`` trained further on ``bank``'s fm_train curves; kept: the step with the lowest
    NLL on a fixed draw of fm_val curves."""
    tc = fit.finetune
    torch.manual_seed(seed)
    torch.set_num_threads(int(tc.num_threads))
    net, meta = load_lcpfn(init)
    train_rows, val_rows = np.flatnonzero(bank.split == "fm_train"), np.flatnonzero(bank.split == "fm_val")
    if not len(train_rows) or not len(val_rows):
        raise ConfigError(f"curve bank {bank.path}: LC-PFN fine-tuning needs fm_train and fm_val curves")
    ctx = (int(tc.ctx_min), float(tc.ctx_max_frac))
    val = [bank_batch(bank, val_rows, 256, np.random.default_rng([seed, 10**6, i]), ctx_range=ctx) for i in range(4)]
    vg = torch.Generator()

    def evaluate():
        vg.manual_seed(seed)
        return np.mean([float(batch_nll(net, b)) for b in val])

    rec = _loop(
        net,
        lambda rng: bank_batch(bank, train_rows, int(tc.batch_size), rng, ctx_range=ctx),
        tc,
        Path(out),
        seed,
        evaluate,
    )
    rec.update(stage="finetune", seed=seed, init=_rel(init), bank=_rel(bank.path), prior=meta.get("extra", {}))
    rec["ckpt"] = str(
        save_lcpfn(
            net,
            meta["hparams"],
            Path(out) / "lcpfn.ckpt",
            rec,
            f"python -m mara.predictors.lcpfn_train stage=finetune init={_rel(init)} seed={seed}",
        )
    )
    return rec


#: the stages of LC-PFN's training, in order
STAGES = ("prior", "finetune")


def run_stage(stage: str, fit: LCPFNFitSettings, out, seed: int = 0, init=None, bank_path=None) -> dict:
    """One stage of the command line's (``prior`` or ``finetune``); a wrong stage or a fine-tuning without ``init``:
    a one-line ConfigError."""
    if stage == "prior":
        return train_prior(fit, out, seed)
    if stage == "finetune":
        if not init:
            raise ConfigError("stage=finetune needs init=<a prior-trained lcpfn.ckpt>")
        return finetune(fit, load_bank(bank_path or default_bank_path()), init, out, seed)
    raise ConfigError(f"stage must be prior or finetune, got {stage!r}")
