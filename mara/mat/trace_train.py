"""Training MARA's trace policy (``python -m mara.train experiment=trace_mara``; docs/traces-target-loss.md).

1. **Imitation**: every teacher rule (mara/traces/policy.py ``RULES``, scoring the same greedy allocator) replays
   every training window of target-loss jobs; the window's best rule (most deadlines met; ties to the earlier rule)
   is replayed again with its decisions recorded, and the network learns them: the Plackett–Luce likelihood of the
   teacher's order (its first ``top_k`` picks, every live job in each denominator) plus a logistic loss on which jobs
   the teacher defers (score < 0).
2. **Policy gradient** (REINFORCE with a per-window baseline): the network's scores plus Gumbel noise give a sampled
   Plackett–Luce order, the reward is the share of the window's deadlines met; ``samples`` orders per window, the
   window's mean reward as baseline.
3. **Choice on validation windows only**: the imitation network and each policy-gradient round's network replay
   the validation windows; the best mean share met is shipped (``mara_trace.ckpt``: tensors and plain data, loaded
   with weights_only=True).

Every stage writes its product into the run folder and a rerun resumes from it; TensorBoard scalars go to
``<run>/tb``. Windows: ``train`` / ``val`` lists of ``{path, cluster, start_day, days, warmup_days, count}``
(``count`` consecutive windows from ``start_day`` of the trace's first submission). The settings arrive parsed and
checked (``TracePolicySettings``, mara/mat/trace_settings.py, read from the config by mara/train_settings.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from mara.core.config import ConfigError
from mara.curves.bank import default_bank_path, load_bank
from mara.mat.trace_settings import TracePolicySettings, TraceWindowSpec
from mara.predictors.factory import predictor_from
from mara.traces.policy import RULES, PriorityNet, TraceMARA
from mara.traces.replay import JobState, replay
from mara.traces.schema import SIZE_CLASSES, Window, load_trace, make_windows, parse_cluster, size_class, window_jobs
from mara.traces.target_loss import declared_batches, target_loss_jobs
from mara.traces.target_run import BANDS, PredictedCount
from mara.traces.throughput import job_speeds, known_models

DAY = 86400
RECIPE = "python -m mara.train experiment=trace_mara"  # what a checkpoint of this module was trained by


@dataclass
class Episode:
    """One window of target-loss jobs, ready to replay under any scheduler (its estimate cache kept across runs)."""

    name: str
    jobs: object
    scored: np.ndarray  # [J] bool
    view: PredictedCount
    gpus: int
    slot: int

    def play(self, sched: TraceMARA) -> float:
        """Share of the scored jobs' deadlines met under ``sched``."""
        self.view.inner, self.view.caps = sched, sched.caps
        tput, max_level = job_speeds(self.jobs, sched.caps, self.gpus)
        state = JobState(
            self.jobs.submit,
            self.jobs.deadline,
            tput,
            max_level,
            self.jobs.iterations.astype(np.float64).copy(),
            self.gpus,
            slot=self.slot,
        )
        rep = replay(state, self.view, size_class(self.jobs.num_gpu), len(SIZE_CLASSES))
        return float(rep.met[self.scored].mean()) if self.scored.any() else 0.0


def trace_windows(spec: TraceWindowSpec, where: str) -> tuple[str, object, list[Window]]:
    """(path, (trace, cluster), windows) of one window spec; a missing trace or a spec no window fits is one
    ``ConfigError`` line (the entry point's parse calls this before any work)."""
    path = Path(spec.path)
    if not path.is_file():
        raise ConfigError(
            f"trace_mara.{where}: trace {path} not found (unpack: mkdir -p data_cache && tar xzf "
            "../shared/data/itp-traces.tar.gz -C data_cache)"
        )
    cluster = parse_cluster(spec.cluster)
    trace = load_trace(str(path), cluster, 1.5, known_models())
    if spec.split == "val":  # the validation windows of the evaluation protocol, exactly as mara.evaluate
        wins = make_windows(trace, int(spec.days * DAY), int(spec.warmup_days * DAY), 1, spec.count, None)
        return str(path), (trace, cluster), [w for w in wins if w.split == "val"]
    t0, length = int(trace.submit[0]), int(spec.days * DAY)
    warm = int(spec.warmup_days * DAY)
    out = []
    for k in range(spec.count):
        start = t0 + int(spec.start_day * DAY) + k * (length + warm) + warm
        if start + length > int(trace.submit[-1]):
            break
        out.append(Window(k, "train", start, length, warm))
    if not out:
        raise ConfigError(
            f"trace_mara.{where}: no window of {spec.days:g} days fits {path} from day {spec.start_day:g}"
        )
    return str(path), (trace, cluster), out


def episodes(windows, bank, predictor, settings: TracePolicySettings) -> list[Episode]:
    """Episodes of every window of ``windows`` (each the output of ``trace_windows``), the jobs' targets and the
    estimates as ``settings`` say."""
    out = []
    for path, (trace, cluster), wins in windows:
        for w in wins:
            jobs, scored = window_jobs(trace, w)
            tl = target_loss_jobs(
                jobs.job_id,
                jobs.model,
                jobs.iterations,
                bank,
                settings.target_seed,
                settings.declare_quantile,
            )
            prior = np.ceil(
                tl.declared
                / tl.past_batches
                * np.array(
                    [declared_batches(bank, f, e, settings.prior_quantile) for f, e in zip(tl.family, tl.target)]
                )
            )
            view = PredictedCount(TraceMARA(rule="edf"), tl, bank, predictor, BANDS[settings.band], prior)
            name = f"{Path(path).stem}/{w.split}{w.index}@{cluster.name}"
            out.append(Episode(name, jobs, scored, view, cluster.gpus, 60))
    return out


def pl_loss(net: PriorityNet, x: np.ndarray, order: np.ndarray, defer: np.ndarray, top_k: int) -> torch.Tensor:
    """Negative log-likelihood of the first ``top_k`` picks of ``order`` (Plackett–Luce over every job left) plus
    the logistic loss of the defer bits; -> scalar."""
    s = net(torch.as_tensor(x))
    return pl_nll(s, order, top_k) + torch.nn.functional.binary_cross_entropy_with_logits(
        s, torch.as_tensor(~defer, dtype=torch.float32)
    )


def pl_nll(s: torch.Tensor, order: np.ndarray, top_k: int) -> torch.Tensor:
    """-log P(first ``top_k`` picks of ``order``) under Plackett–Luce scores ``s [n]``."""
    so = s[torch.as_tensor(order)]
    k = min(top_k, so.numel())
    tail = torch.logcumsumexp(so.flip(0), dim=0).flip(0)  # logsumexp of so[i:]
    return -(so[:k] - tail[:k]).sum()


def save_policy(net: PriorityNet, path: Path, meta: dict) -> None:
    """A checkpoint of tensors and plain data (loadable with weights_only=True)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    blob = {
        "kind": "trace_policy",
        "recipe": RECIPE,
        "hidden": int(net.enc[0].out_features),
        "state_dict": net.state_dict(),
        "meta": meta,
    }
    torch.save(blob, str(tmp))
    tmp.replace(path)


def load_into(net: PriorityNet, path: Path) -> dict:
    ck = torch.load(str(path), map_location="cpu", weights_only=True)
    net.load_state_dict(ck["state_dict"])
    return ck.get("meta", {})


def validate(net: PriorityNet, val: list[Episode]) -> float:
    """Mean share met over the validation windows."""
    return float(np.mean([ep.play(TraceMARA(net=net)) for ep in val]))


def train_trace_policy(settings: TracePolicySettings, out: Path, log=print) -> dict:
    """The three stages above in the run folder ``out``; returns what each produced."""
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(settings.seed)
    torch.set_num_threads(settings.threads)  # small networks: one thread beats two contending for the cores
    t_cpu0 = time.process_time()
    out.mkdir(parents=True, exist_ok=True)
    tb = SummaryWriter(str(out / "tb"))
    bank = load_bank(default_bank_path())
    predictor = predictor_from(settings.predictor, bank.path)
    train_eps = episodes([trace_windows(s, "train") for s in settings.train], bank, predictor, settings)
    val_eps = episodes([trace_windows(s, "val") for s in settings.val], bank, predictor, settings)
    log(f"trace policy: {len(train_eps)} training windows, {len(val_eps)} validation windows")
    state_file = out / "state.json"
    st = json.loads(state_file.read_text()) if state_file.exists() else {}

    def save_state():
        st["cpu_s"] = st.get("cpu_s_before", 0.0) + time.process_time() - t_cpu0
        state_file.write_text(json.dumps(st, indent=1))

    st["cpu_s_before"] = st.get("cpu_s", 0.0)
    # 1. teachers: every rule on every training window
    if "teachers" not in st:
        table = {}
        for ep in train_eps:
            table[ep.name] = {r: ep.play(TraceMARA(rule=r)) for r in RULES}
            log(f"  {ep.name}: " + ", ".join(f"{r} {v:.3f}" for r, v in table[ep.name].items()))
        st["teachers"] = table
        save_state()
    net = PriorityNet(settings.hidden)
    imit = out / "imitation.ckpt"
    if imit.exists():
        load_into(net, imit)
    else:
        data = []
        for ep in train_eps:
            row = st["teachers"][ep.name]
            best = max(RULES, key=lambda r: (row[r], -RULES.index(r)))
            rec: list = []
            ep.play(TraceMARA(rule=best, record=rec))
            for x, order, defer in rec:  # the teacher's first ``keep`` jobs: a backlog of thousands costs, adds little
                keep = order[: settings.keep]
                data.append((x[keep], np.arange(keep.size), defer[keep]))
        log(f"imitation: {len(data)} decisions")
        opt = torch.optim.Adam(net.parameters(), lr=settings.lr)
        rng = np.random.default_rng(settings.seed)
        step = 0
        for epoch in range(settings.imitation_epochs):
            tot = 0.0
            for i in rng.permutation(len(data)):
                x, order, defer = data[i]
                loss = pl_loss(net, x, order, defer, settings.top_k)
                opt.zero_grad()
                loss.backward()
                opt.step()
                tot += float(loss.detach())
                step += 1
            tb.add_scalar("imitation/loss", tot / max(len(data), 1), epoch)
            log(f"  imitation epoch {epoch}: loss {tot / max(len(data), 1):.4f}")
        save_policy(net, imit, {"stage": "imitation"})
    if "val_imitation" not in st:
        st["val_imitation"] = validate(net, val_eps)
        save_state()
    tb.add_scalar("val/met", st["val_imitation"], 0)
    log(f"validation, imitation: {st['val_imitation']:.4f}")
    # 2. policy gradient rounds, each validated
    pg = out / "pg_last.ckpt"
    opt = torch.optim.Adam(net.parameters(), lr=settings.pg_lr)
    done_rounds = int(st.get("pg_rounds_done", 0))
    if done_rounds and pg.exists():
        load_into(net, pg)
    rng = np.random.default_rng(settings.seed + 1 + done_rounds)
    per_round = settings.windows_per_round
    for rnd in range(done_rounds, settings.pg_rounds):
        picks = rng.choice(len(train_eps), size=min(per_round, len(train_eps)), replace=False)
        opt.zero_grad()
        rewards = []
        for i in picks:
            runs = []
            for k in range(settings.samples):
                rec: list = []
                r = train_eps[i].play(TraceMARA(net=net, sample=True, seed=int(rng.integers(1 << 31)), record=rec))
                runs.append((r, rec))
            base = float(np.mean([r for r, _ in runs]))
            for r, rec in runs:
                if r == base:
                    continue
                logp = sum(-pl_nll(net(torch.as_tensor(x)), order, settings.top_k) for x, order, _ in rec)
                (-(r - base) * logp / (len(picks) * len(runs))).backward()
            rewards.append(base)
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        v = validate(net, val_eps)
        st.setdefault("val_pg", []).append(v)
        st["pg_rounds_done"] = rnd + 1
        save_policy(net, pg, {"stage": "pg", "round": rnd + 1})
        if v > st.get("best_val", st["val_imitation"]):
            st["best_val"], st["best_round"] = v, rnd + 1
            save_policy(net, out / "pg_best.ckpt", {"stage": "pg", "round": rnd + 1})
        save_state()
        tb.add_scalar("pg/train_met", float(np.mean(rewards)), rnd + 1)
        tb.add_scalar("val/met", v, rnd + 1)
        log(f"  policy-gradient round {rnd + 1}: training met {np.mean(rewards):.4f}, validation {v:.4f}")
    # 3. ship the validation's choice
    chosen = out / "pg_best.ckpt" if st.get("best_round") else imit
    load_into(net, chosen)
    meta = {
        "stage": "pg" if st.get("best_round") else "imitation",
        "val_met": float(st.get("best_val", st["val_imitation"])),
        "predictor": settings.predictor,
        "band": settings.band,
        "train": [asdict(s) for s in settings.train],
        "val": [asdict(s) for s in settings.val],
    }
    save_policy(net, out / "mara_trace.ckpt", meta)
    save_state()
    tb.close()
    log(
        f"shipped {out / 'mara_trace.ckpt'} ({meta['stage']}, validation met {meta['val_met']:.4f}); "
        f"CPU time {st['cpu_s']:.0f} s"
    )
    return {"ckpt": str(out / "mara_trace.ckpt"), **{k: v for k, v in st.items() if k != "cpu_s_before"}}
