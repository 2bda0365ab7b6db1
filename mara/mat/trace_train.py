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
from mara.core.rundir import STAGE_FILE, plan_stage, run_settled_stage
from mara.core.runlog import log as runlog
from mara.core.safe_load import CheckpointError, load_checkpoint
from mara.curves.bank import default_bank_path
from mara.mat.trace_settings import TracePolicySettings, TraceWindowSpec
from mara.predictors.factory import predictor_from
from mara.traces.policy import RULES, PriorityNet, TraceMARA
from mara.traces.replay import JobState, replay
from mara.traces.schema import SIZE_CLASSES, Window, load_trace, make_windows, parse_cluster, size_class, window_jobs
from mara.traces.target_loss import declared_batches, target_loss_jobs
from mara.traces.target_run import BANDS, PredictedCount, target_bank
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


def save_policy(net: PriorityNet, path: Path, meta: dict, resume: dict | None = None) -> None:
    """A checkpoint of tensors and plain data (loadable with weights_only=True); ``resume``: what a training needs
    beyond the network to continue exactly (optimizer state, random streams), as tensors and plain values."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    blob = {
        "kind": "trace_policy",
        "recipe": RECIPE,
        "hidden": int(net.enc[0].out_features),
        "state_dict": net.state_dict(),
        "meta": meta,
        **(resume or {}),
    }
    torch.save(blob, str(tmp))
    tmp.replace(path)


def load_into(net: PriorityNet, path: Path) -> dict:
    """Load the trace-policy checkpoint ``path`` into ``net`` (tensors and plain data only); its whole contents.
    A file that is not a trace-policy checkpoint of ``net``'s width is one ``CheckpointError`` line."""
    ck = load_checkpoint(path, "trace-policy checkpoint")
    if not isinstance(ck, dict) or ck.get("kind") != "trace_policy" or not isinstance(ck.get("state_dict"), dict):
        raise CheckpointError(f"{path} is not a trace-policy checkpoint (no kind trace_policy with a state_dict)")
    try:
        net.load_state_dict(ck["state_dict"])
    except (RuntimeError, TypeError, ValueError) as exc:
        why = " ".join(str(exc).split())[:120]
        raise CheckpointError(
            f"{path} is not a trace-policy checkpoint of width {net.enc[0].out_features} ({why})"
        ) from None
    return ck


def validate(net: PriorityNet, val: list[Episode]) -> float:
    """Mean share met over the validation windows."""
    return float(np.mean([ep.play(TraceMARA(net=net)) for ep in val]))


# ------------------------------------------------------------------------------ the run folder: record and resume
#: the trace policy's settings that change how fast it trains, not what it produces
NEUTRAL_SETTINGS = ("threads",)
#: state.json entries of the rounds a ``pg_last.ckpt`` has done (saved in it, restored from it)
PG_HISTORY = ("val_pg", "best_val", "best_round")
#: what a trace-policy run folder holds once training has started (its settings recorded in ``stage.json``)
PRODUCTS = ("state.json", "imitation.ckpt", "pg_last.ckpt", "pg_best.ckpt", "mara_trace.ckpt")


def _flat(x, key: str = "") -> dict:
    if isinstance(x, dict):
        return {k: v for n, y in x.items() for k, v in _flat(y, f"{key}.{n}" if key else str(n)).items()}
    if isinstance(x, (list, tuple)):
        return {k: v for i, y in enumerate(x) for k, v in _flat(y, f"{key}.{i}").items()}
    return {key: x}


def trace_policy_record(settings: TracePolicySettings) -> dict:
    """What the trace policy's products depend on, flat and JSON-plain (``{"hidden": 32, "train.0.count": 2, ...}``):
    every setting but :data:`NEUTRAL_SETTINGS`, and the shipped curve bank the jobs draw their curves from (the real
    one, or the parametric one standing in for it)."""
    plain = {k: v for k, v in asdict(settings).items() if k not in NEUTRAL_SETTINGS}
    return json.loads(json.dumps({**_flat(plain), "bank": default_bank_path().name}))


def check_resumable(out: Path, settings: TracePolicySettings, record: dict) -> None:
    """Before any work: products of a trace-policy training with no record of their settings, a record of other
    settings, or a checkpoint among them that is not a trace policy of this width are one ``ConfigError`` line
    (never reused under new labels)."""
    have = [name for name in PRODUCTS if (out / name).exists()]
    if have and not (out / STAGE_FILE).exists():
        raise ConfigError(
            f"{out} holds trace-policy products ({', '.join(have)}) with no record of the settings they were made "
            f"with: rerun with fresh=true to start over, or choose another hydra.run.dir"
        )
    plan_stage(out, record)  # another record: refused, naming the settings that differ
    for name in have:
        if name.endswith(".ckpt"):
            ck = load_into(PriorityNet(settings.hidden), out / name)
            if name == "pg_last.ckpt":
                check_round(ck, out / name)
    if "state.json" in have:
        try:
            json.loads((out / "state.json").read_text())
        except ValueError:
            raise ConfigError(
                f"{out / 'state.json'} is not readable JSON: rerun with fresh=true to start over"
            ) from None


def check_round(ck: dict, path: Path) -> None:
    """A round's checkpoint holds what resuming after it reads (its round, the optimizer's state, the random streams,
    the rounds' validation history), else one ``CheckpointError`` line."""
    meta, hist = ck.get("meta"), ck.get("history")
    ok = (
        isinstance(meta, dict)
        and isinstance(meta.get("round"), int)
        and isinstance(ck.get("optimizer"), dict)
        and isinstance(ck.get("rng"), dict)
        and isinstance(ck.get("torch_rng"), torch.Tensor)
        and isinstance(hist, dict)
        and set(hist) == set(PG_HISTORY)
    )
    if not ok:
        raise CheckpointError(
            f"{path} is not a resumable policy-gradient round (it needs meta.round, optimizer, rng, torch_rng and "
            f"history): rerun with fresh=true to start over"
        )


def run_trace_policy(settings: TracePolicySettings, out: Path, log=print) -> dict:
    """The trace policy's training in the run folder ``out`` (held by the caller): products made with other
    settings refused before any work, a finished training with these settings reused, an unfinished one resumed
    exactly (:func:`train_trace_policy`)."""
    out = Path(out)
    record = trace_policy_record(settings)
    check_resumable(out, settings, record)
    return run_settled_stage(
        out, lambda _: train_trace_policy(settings, out, log), record, "trace policy", resume_file="state.json"
    )


# ------------------------------------------------------------------------------------------------------ training
class TrainingState:
    """``<run>/state.json``: what each finished step produced (teachers' table, validation scores, rounds done) and
    the CPU seconds of every attempt together."""

    def __init__(self, path: Path):
        self.path = path
        self.data = json.loads(path.read_text()) if path.exists() else {}
        self.cpu_before, self.t0 = float(self.data.get("cpu_s", 0.0)), time.process_time()

    def save(self) -> None:
        self.data["cpu_s"] = self.cpu_before + time.process_time() - self.t0
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        tmp.replace(self.path)


def train_episodes(settings: TracePolicySettings, log=print) -> tuple[list[Episode], list[Episode]]:
    """(training, validation) episodes of the settings' windows, on the curve bank (the parametric bank standing in
    for an absent real one is said in one line)."""
    bank, _ = target_bank(log=runlog.warning)
    predictor = predictor_from(settings.predictor, bank.path)
    train_eps = episodes([trace_windows(s, "train") for s in settings.train], bank, predictor, settings)
    val_eps = episodes([trace_windows(s, "val") for s in settings.val], bank, predictor, settings)
    log(f"trace policy: {len(train_eps)} training windows, {len(val_eps)} validation windows")
    return train_eps, val_eps


def teachers(train_eps: list[Episode], st: TrainingState, log=print) -> dict:
    """{window: {rule: share met}}: every teacher rule on every training window (recorded once)."""
    if "teachers" not in st.data:
        table = {}
        for ep in train_eps:
            table[ep.name] = {r: ep.play(TraceMARA(rule=r)) for r in RULES}
            log(f"  {ep.name}: " + ", ".join(f"{r} {v:.3f}" for r, v in table[ep.name].items()))
        st.data["teachers"] = table
        st.save()
    return st.data["teachers"]


def imitation(net: PriorityNet, train_eps: list[Episode], table: dict, settings: TracePolicySettings, tb, log=print):
    """Train ``net`` on each training window's best rule's decisions (Plackett–Luce + defer bits)."""
    data = []
    for ep in train_eps:
        row = table[ep.name]
        best = max(RULES, key=lambda r: (row[r], -RULES.index(r)))
        rec: list = []
        ep.play(TraceMARA(rule=best, record=rec))
        for x, order, defer in rec:  # the teacher's first ``keep`` jobs: a backlog of thousands costs, adds little
            keep = order[: settings.keep]
            data.append((x[keep], np.arange(keep.size), defer[keep]))
    log(f"imitation: {len(data)} decisions")
    opt = torch.optim.Adam(net.parameters(), lr=settings.lr)
    rng = np.random.default_rng(settings.seed)
    for epoch in range(settings.imitation_epochs):
        tot = 0.0
        for i in rng.permutation(len(data)):
            x, order, defer = data[i]
            loss = pl_loss(net, x, order, defer, settings.top_k)
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += float(loss.detach())
        tb.add_scalar("imitation/loss", tot / max(len(data), 1), epoch)
        log(f"  imitation epoch {epoch}: loss {tot / max(len(data), 1):.4f}")


def pg_gradient(net: PriorityNet, train_eps: list[Episode], picks, rng, settings: TracePolicySettings) -> float:
    """Accumulate one round's REINFORCE gradient on the windows ``picks`` (``samples`` sampled orders each, their
    mean reward the baseline); -> the mean share met over the samples."""
    rewards = []
    for i in picks:
        runs = []
        for _ in range(settings.samples):
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
    return float(np.mean(rewards))


def policy_gradient(net, train_eps, val_eps, st: TrainingState, settings: TracePolicySettings, out: Path, tb, log):
    """The policy-gradient rounds, each validated; every round ends in ``pg_last.ckpt`` with the network, the
    optimizer's state and the sampling stream's, so a killed training resumes exactly where that round ended."""
    opt = torch.optim.Adam(net.parameters(), lr=settings.pg_lr)
    rng = np.random.default_rng(settings.seed + 1)
    last, done_rounds = out / "pg_last.ckpt", 0
    for k in PG_HISTORY:  # what a round not in pg_last.ckpt recorded is done again
        st.data.pop(k, None)
    if last.exists():
        ck = load_into(net, last)
        opt.load_state_dict(ck["optimizer"])
        rng.bit_generator.state = ck["rng"]
        torch.set_rng_state(ck["torch_rng"])
        done_rounds = int(ck["meta"]["round"])
        st.data.update({k: v for k, v in ck["history"].items() if v is not None})
    for rnd in range(done_rounds, settings.pg_rounds):
        picks = rng.choice(len(train_eps), size=min(settings.windows_per_round, len(train_eps)), replace=False)
        opt.zero_grad()
        met = pg_gradient(net, train_eps, picks, rng, settings)
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        v = validate(net, val_eps)
        st.data.setdefault("val_pg", []).append(v)
        st.data["pg_rounds_done"] = rnd + 1
        if v > st.data.get("best_val", st.data["val_imitation"]):
            st.data["best_val"], st.data["best_round"] = v, rnd + 1
            save_policy(net, out / "pg_best.ckpt", {"stage": "pg", "round": rnd + 1})
        resume = {
            "optimizer": opt.state_dict(),
            "rng": rng.bit_generator.state,
            "torch_rng": torch.get_rng_state(),
            "history": {k: st.data.get(k) for k in PG_HISTORY},
        }
        save_policy(net, last, {"stage": "pg", "round": rnd + 1}, resume)
        st.save()
        tb.add_scalar("pg/train_met", met, rnd + 1)
        tb.add_scalar("val/met", v, rnd + 1)
        log(f"  policy-gradient round {rnd + 1}: training met {met:.4f}, validation {v:.4f}")


def train_trace_policy(settings: TracePolicySettings, out: Path, log=print) -> dict:
    """The three stages above in the run folder ``out``, resuming from what an earlier attempt there finished;
    returns what each produced."""
    from torch.utils.tensorboard import SummaryWriter

    torch.manual_seed(settings.seed)
    torch.set_num_threads(settings.threads)  # small networks: one thread beats two contending for the cores
    out.mkdir(parents=True, exist_ok=True)
    tb = SummaryWriter(str(out / "tb"))
    train_eps, val_eps = train_episodes(settings, log)
    st = TrainingState(out / "state.json")
    table = teachers(train_eps, st, log)  # 1. teachers: every rule on every training window
    net, imit = PriorityNet(settings.hidden), out / "imitation.ckpt"
    if imit.exists():
        load_into(net, imit)
    else:
        imitation(net, train_eps, table, settings, tb, log)
        save_policy(net, imit, {"stage": "imitation"})
    if "val_imitation" not in st.data:
        st.data["val_imitation"] = validate(net, val_eps)
        st.save()
    tb.add_scalar("val/met", st.data["val_imitation"], 0)
    log(f"validation, imitation: {st.data['val_imitation']:.4f}")
    policy_gradient(net, train_eps, val_eps, st, settings, out, tb, log)  # 2. policy-gradient rounds
    meta = ship(net, st, settings, out)  # 3. the validation's choice
    tb.close()
    log(
        f"shipped {out / 'mara_trace.ckpt'} ({meta['stage']}, validation met {meta['val_met']:.4f}); "
        f"CPU time {st.data['cpu_s']:.0f} s"
    )
    return {"ckpt": str(out / "mara_trace.ckpt"), **st.data}


def ship(net: PriorityNet, st: TrainingState, settings: TracePolicySettings, out: Path) -> dict:
    """``mara_trace.ckpt``: the best network on the validation windows (a policy-gradient round's, else the
    imitation's), with what it was trained on; -> its meta."""
    best = st.data.get("best_round")
    load_into(net, out / "pg_best.ckpt" if best else out / "imitation.ckpt")
    meta = {
        "stage": "pg" if best else "imitation",
        "val_met": float(st.data.get("best_val", st.data["val_imitation"])),
        "predictor": settings.predictor,
        "band": settings.band,
        "train": [asdict(s) for s in settings.train],
        "val": [asdict(s) for s in settings.val],
    }
    save_policy(net, out / "mara_trace.ckpt", meta)
    st.save()
    return meta
