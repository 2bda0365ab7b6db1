"""``python -m mara.bench``: speed of the batched simulator and of the rule-based protocol.

Prints env-steps per second (one step of one episode = one env-step) under FIFO at E = 1, 64 and
1024 episodes, and the wall time of the full rule-based protocol (FIFO, EDF, Oracle over 3 task sets ×
4 loads × 5 roots × 12 episodes, episode generation included). Targets on the 2-core reference
machine: ≥ 500,000 env-steps/s at E = 1024; protocol < 60 s. MAT throughput of the FM recipe mat=band (rollout alone and
whole PPO iterations, env-steps/s, with and without the FM predictor; target ≥ 15,000 PPO env-steps/s with FM and
≥ 1/80 of the simulator's E = 1024 figure) is printed next to the simulator's (``--no-mat`` skips it, ``--recipe``
picks another conf/mat recipe, ``--device cuda`` puts the policy on a GPU); ``--json FILE`` writes the three
headline figures of the run. ``--clairvoyant`` adds the Clairvoyant
bound over the p = 0.04 protocol (target < 10 minutes). Predictor latency is part of the prediction
benchmark (``python -m mara.evaluate experiment=prediction``); ``--predictors`` times the shipped FM checkpoints
(paper v1 and v3) interleaved in one process on the ID Table-1 prefixes (target ≤ 0.25 ms/prefix,
batched, one thread), so a loaded machine inflates both alike. The peer's simulator beside our replay of the
same file is ``python -m mara.peers bench`` (mara/peers/bench.py). ``--decision-ms`` times
every predictor's band (``predict_band``, what the simulator asks at a decision) on the same prefixes: ms for a
decision that refreshes one task, and ms per prefix when a decision refreshes 64 (one thread, interleaved).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mara.allocators.rules import EDF, FIFO
from mara.bench.traces import expand_methods, parse_traces, trace_rows
from mara.bounds.clairvoyant_k import clairvoyant_k_batch
from mara.core.config import ConfigError
from mara.curves.bank import default_bank_path, load_bank, shipped_bank_path
from mara.curves.families import ID_FAMILIES
from mara.eval.prediction import CONF_PREDICTOR, build_queries
from mara.mat import ppo as ppo_step
from mara.mat.losses import gae
from mara.mat.nets import MATPolicy
from mara.mat.rollout import EpisodeStream, TrainingEnv, collect_rollout
from mara.predictors.estimates import predict_band
from mara.predictors.factory import predictor_from
from mara.predictors.fm.cache import FlowSampleCache
from mara.predictors.prefix import observe
from mara.preflight import check_writable
from mara.preflight.traces import check_bench_traces
from mara.sim.env import BatchedEnv
from mara.sim.workload import PAPER_TASK_SETS, EpisodeBatch, generate_episodes
from mara.train_settings import load_recipe, mat_settings


def env_steps_per_second(bank, E: int, load: float = 0.04, repeats: int = 1) -> tuple[float, int]:
    """Best-of-``repeats`` env-steps/s of FIFO over E ID episodes (episode generation not timed)."""
    ep = generate_episodes(bank, bank.family_params, PAPER_TASK_SETS["ID"], load, root=12345, n_episodes=E)
    best, n_steps = 0.0, 0
    for _ in range(repeats):
        env, alloc = BatchedEnv(ep, bank), FIFO()
        obs = env.reset()
        t0, steps = time.perf_counter(), 0
        while not env.done.all():
            obs, _, _, _ = env.step(alloc.act(obs))
            steps += 1
        dt = time.perf_counter() - t0
        best = max(best, steps * E / dt)
        n_steps = steps
    return best, n_steps


def rule_protocol_seconds(bank, loads=(0.04, 0.05, 0.06, 0.07), roots=5, episodes=12) -> tuple[float, dict]:
    """Wall time of FIFO, EDF and Oracle over the whole protocol; returns (seconds, mean success %)."""
    t0 = time.perf_counter()
    ep = EpisodeBatch.concat(
        [
            generate_episodes(bank, bank.family_params, ts, p, r, episodes)
            for ts in PAPER_TASK_SETS.values()
            for p in loads
            for r in range(roots)
        ]
    )
    rates = {}
    for alloc in (FIFO(), EDF()):
        env = BatchedEnv(ep, bank)
        obs = env.reset()
        while not env.done.all():
            obs, _, _, _ = env.step(alloc.act(obs))
        rates[alloc.name] = 100 * float(np.mean(env.metrics()["success_rate"]))
    rates["Oracle"] = 100 * float(np.mean(ep.oracle_successes() / ep.n_tasks))
    return time.perf_counter() - t0, rates


def clairvoyant_seconds(bank, roots=5, episodes=12, time_limit_s=10.0) -> tuple[float, int, int]:
    """Wall time of Clairvoyant (admission limit modelled) over the p = 0.04 protocol; returns (seconds, optimal
    count, episodes)."""

    ep = EpisodeBatch.concat(
        [
            generate_episodes(bank, bank.family_params, ts, 0.04, r, episodes)
            for ts in PAPER_TASK_SETS.values()
            for r in range(roots)
        ]
    )
    t0 = time.perf_counter()
    res = clairvoyant_k_batch(
        ep.arrival, ep.deadline, ep.need, ep.n_tasks, n_nodes=7, max_active=10, time_limit_s=time_limit_s
    )
    return time.perf_counter() - t0, sum(r.optimal for r in res), len(res)


def predictor_ms_per_prefix(bank, variants=(None, "v3"), repeats: int = 7) -> tuple[dict, int]:
    """Best-of-``repeats`` ms per prefix of one batched ``predict_remaining`` call per FM checkpoint variant,
    interleaved, on the ID fm_val Table-1 queries (one thread)."""
    import torch
    from omegaconf import OmegaConf

    torch.set_num_threads(1)
    q = build_queries(bank, [f for f in ID_FAMILIES if len(bank.rows(f, "fm_val"))], "fm_val", bank.family_params)
    S, L = observe(bank, q["rows"], q["n_obs"])
    args = (S, L, q["n_obs"], q["eps"], q["cap"], bank.batch_size[q["rows"]], bank.lr[q["rows"]])
    preds = {}
    for v in variants:
        cfg = OmegaConf.load(CONF_PREDICTOR / "fm.yaml")
        cfg.ckpt_variant = v
        preds[v or "v1"] = predictor_from(cfg, bank.path)
    best = {k: np.inf for k in preds}
    for _ in range(repeats):
        for k, p in preds.items():
            t0 = time.perf_counter()
            p.predict_remaining(*args)
            best[k] = min(best[k], time.perf_counter() - t0)
    return {k: 1e3 * v / len(q["rows"]) for k, v in best.items()}, len(q["rows"])


DECISION_PREDICTORS = ("wls", "fm", "fm_cal", "qr", "qr_cal", "lcpfn", "lcpfn_ft", "qr_ctx", "qr_ctx_cal")


def predictor_ms_per_decision(bank, names=DECISION_PREDICTORS, repeats: int = 5) -> dict:
    """{name: (ms for one prefix, ms per prefix for 64)}: best-of-``repeats`` ``predict_band`` calls on ID fm_val
    Table-1 prefixes (interleaved, one thread), as the simulator asks at a decision refreshing 1 or 64 tasks."""
    import torch

    torch.set_num_threads(1)
    q = build_queries(bank, [f for f in ID_FAMILIES if len(bank.rows(f, "fm_val"))], "fm_val", bank.family_params)
    S, L = observe(bank, q["rows"], q["n_obs"])
    full = (S, L, q["n_obs"], q["eps"], q["cap"], bank.batch_size[q["rows"]], bank.lr[q["rows"]])
    fam = bank.family[q["rows"]]
    preds = {n: predictor_from(n, bank.path) for n in names}
    best = {(n, k): np.inf for n in names for k in (1, 64)}
    for r in range(repeats):
        for k in (1, 64):
            idx = np.random.default_rng([r, k]).choice(len(q["rows"]), size=min(k, len(q["rows"])), replace=False)
            args = tuple(np.asarray(a)[idx] for a in full)
            for n, p in preds.items():
                t0 = time.perf_counter()
                predict_band(p, *args, family=fam[idx])
                best[(n, k)] = min(best[(n, k)], (time.perf_counter() - t0) / len(idx))
    return {n: (1e3 * best[(n, 1)], 1e3 * best[(n, 64)]) for n in names}


def mat_setup(bank, predictor_name, threads: int, recipe: str, overrides, device: str) -> tuple:
    """What a MAT throughput measurement runs: (recipe as plain data, its typed settings, the staggered training env,
    the FM cache or None, the policy on ``device``, its optimiser)."""
    import torch
    from omegaconf import OmegaConf

    torch.set_num_threads(threads)
    cfg = load_recipe(recipe)
    cfg.merge_with_dotlist(list(overrides or []))
    c = OmegaConf.to_container(cfg, resolve=True)
    ro, ppo, sim = c["rollout"], c["ppo"], c["sim"]
    typed = mat_settings(cfg)  # what the PPO update reads
    predictor = predictor_from(predictor_name, bank.path)
    cache = (
        FlowSampleCache(int(ro.get("fm_cache_entries", 100_000)))
        if ro.get("fm_cache") and getattr(predictor, "supports_cache", False)
        else None
    )
    stream = EpisodeStream(bank, bank.family_params, "ID", 0.04, 424242, ro["n_episodes"], n_steps=sim["n_steps"])
    env = TrainingEnv(
        stream,
        bank,
        predictor,
        "dense",
        sim["beta"],
        sim["n_nodes"],
        sim["max_active"],
        sim["obs_every"],
        ro["n_groups"],
        ro["stagger"],
        fm_cache=cache,
    )
    torch.manual_seed(0)
    policy = MATPolicy(n_slots=sim["max_active"], n_nodes=sim["n_nodes"], **c["net"]).to(device)
    opt = torch.optim.Adam(policy.parameters(), lr=ppo["lr"], eps=1e-5)
    return c, typed, env, cache, policy, opt


def mat_throughput(
    bank,
    predictor_name: str | None = "fm",
    iterations: int = 3,
    threads: int = 1,
    recipe: str = "band",
    overrides: list[str] | None = None,
    device: str = "cpu",
    warmup: int = 1,
) -> dict:
    """MAT env-steps/s of a training recipe (conf/mat/<recipe>.yaml, default: band, the FM recipe) on ``device``:
    rollout only (sampling the policy in the staggered training env, FM estimates included, through the recipe's FM
    cache) and whole PPO iterations (rollout + GAE + the recipe's update epochs × minibatches, mara/mat/ppo.py).
    ``warmup`` untimed iterations come first (as in training, where imitation and earlier iterations have filled
    the FM cache); the result includes the FM cache hit rate over the timed iterations."""
    import torch

    c, typed, env, cache, policy, opt = mat_setup(bank, predictor_name, threads, recipe, overrides, device)
    ro, ppo = c["rollout"], c["ppo"]
    g = torch.Generator().manual_seed(0)
    n_mb = ppo_step.n_minibatches(typed.ppo, typed.rollout)
    clip = lambda: torch.nn.utils.clip_grad_norm_(policy.parameters(), ppo["max_grad_norm"])  # noqa: E731
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    t_roll = t_all = 0.0
    steps = 0
    for it in range(warmup + iterations):
        if it == warmup and cache is not None:
            cache.hits = cache.misses = 0
        sync()
        t0 = time.perf_counter()
        buf = collect_rollout(policy, env, ro["n_steps"], g, ro["scale"])
        sync()
        t1 = time.perf_counter()
        adv, ret = gae(buf.rewards, buf.values, buf.dones, buf.last_value, ppo["gamma"], ppo["gae_lambda"])
        batch = ppo_step.flatten(buf, adv, ret)
        ppo_step.update(policy, opt, batch, typed.ppo, n_mb, g, lambda loss: loss.backward(), clip)
        sync()
        t2 = time.perf_counter()
        if it >= warmup:
            t_roll += t1 - t0
            t_all += t2 - t0
            steps += int(buf.live.sum())
    out = {
        "rollout": steps / t_roll,
        "train": steps / t_all,
        "env_steps": steps,
        "iterations": iterations,
        "decoder": c["net"].get("decoder", "autoregressive"),
        "n_episodes": ro["n_episodes"],
        "n_steps": ro["n_steps"],
        "update_epochs": ppo["update_epochs"],
        "n_minibatches": n_mb,
        "device": device,
        "threads": threads,
    }
    if cache is not None:
        out["fm_cache"] = cache.stats()
    return out


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m mara.bench``."""
    ap = argparse.ArgumentParser(description="MARA benchmarks (simulator and protocol speed)")
    ap.add_argument("--bank", default=None, help="bank path or shipped name (default: the shipped default bank)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clairvoyant", action="store_true", help="also time Clairvoyant over the p=0.04 protocol")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test of the benchmark itself)")
    ap.add_argument("--predictors", action="store_true", help="only time the shipped FM checkpoints (v1, v3)")
    ap.add_argument("--decision-ms", action="store_true", help="only time every predictor's band per decision")
    ap.add_argument("--no-mat", action="store_true", help="skip the MAT rollout/training throughput")
    ap.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        help="also write {sim_env_steps_per_s, mat_rollout_env_steps_per_s, mat_ppo_env_steps_per_s, ...} "
        "measured in this run (band recipe, FM predictor) to FILE",
    )
    ap.add_argument(
        "--recipe", default="band", help="MAT recipe for the MAT figures (conf/mat/<recipe>.yaml; band: the FM recipe)"
    )
    ap.add_argument(
        "--device", default="cpu", help="device of the MAT policy (cpu | cuda); the simulator runs on the CPU"
    )
    ap.add_argument("--mat-iterations", type=int, default=None, help="timed PPO iterations (default 3; 1 with --quick)")
    ap.add_argument(
        "--traces",
        nargs="*",
        default=None,
        metavar="CSV:CLUSTER",
        help="only the trace-replay rows: EDF and ElasticFlow on each CSV:n<nodes>g<gpus> (none given: the "
        "shipped sample on n64g8), and decision time per slot on 64 ... 1,024 GPUs",
    )
    ap.add_argument(
        "--trace-limit",
        type=float,
        default=600.0,
        help="seconds a trace replay may run before it is reported as over the limit",
    )
    ap.add_argument(
        "--trace-sweep",
        type=int,
        nargs="*",
        default=[8, 16, 32, 64, 128],
        metavar="NODES",
        help="cluster sizes (nodes of 8 GPUs) of the decision-time sweep; none: skip it",
    )
    ap.add_argument(
        "--trace-methods",
        nargs="+",
        default=["EDF", "ElasticFlow"],
        help="trace schedulers timed (method names; all: every registered trace rule, one per distinct scheduler)",
    )
    return ap


def main(argv=None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    try:
        check_json_target(args.json)
        if args.traces is not None:
            traces = parse_traces(args.traces)
            methods, aliases = expand_methods(args.trace_methods)
            check_bench_traces(traces, methods, args.trace_sweep)
    except (ConfigError, ValueError) as exc:  # one line, exit 2, before any work
        ap.exit(2, f"error: {str(exc).strip().splitlines()[0]}\n")
    if args.traces is not None:
        print(f"{'benchmark':<44}{'value':>16}")
        rec = trace_rows(
            traces, methods=tuple(methods), sizes=tuple(args.trace_sweep), time_limit=args.trace_limit, aliases=aliases
        )
        write_json(args.json, rec, say=False)
        return
    bank = load_bank(shipped_bank_path(args.bank) if args.bank else default_bank_path())
    print(f"bank: {bank.path} ({len(bank)} curves)")
    print(f"{'benchmark':<44}{'value':>16}  target")
    if args.predictors:
        ms, n = predictor_ms_per_prefix(bank)
        for k, v in ms.items():
            print(f"{f'FM {k} ms/prefix, {n} ID prefixes batched':<44}{v:>16.4f}  <= 0.25")
        return
    if args.decision_ms:
        for n, (one, many) in predictor_ms_per_decision(bank).items():
            print(f"{f'{n} band ms: 1 task / per task of 64':<44}{one:>8.3f} / {many:.4f}")
        return
    record: dict = {}
    roots, episodes = simulator_rows(bank, args, record)
    if not args.no_mat:
        mat_rows(bank, args, record)
    if args.clairvoyant:
        secs, n_opt, n = clairvoyant_seconds(bank, roots=roots, episodes=episodes)
        print(f"{f'Clairvoyant p=0.04, {n} episodes (s)':<44}{secs:>16.2f}  < 600   ({n_opt}/{n} proven optimal)")
    record.update(
        bank=str(bank.path),
        quick=bool(args.quick),
        recipe=args.recipe,
        device=args.device,
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    write_json(args.json, record)


def check_json_target(path) -> None:
    """``--json FILE`` can be written: its folder is (or can be made) a writable folder; checked before any work."""
    if path:
        from pathlib import Path

        check_writable(Path(path).parent, f"--json {path}: the folder")
        if Path(path).is_dir():
            raise ConfigError(f"--json {path} is a folder: name a file")


def write_json(path, record: dict, say: bool = True) -> None:
    """``record`` as JSON at ``path`` (nothing when None)."""
    if not path:
        return
    import json
    from pathlib import Path

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(record, indent=1))
    if say:
        print(f"wrote {path}")


def simulator_rows(bank, args, record: dict) -> tuple[int, int]:
    """The simulator's env-steps/s rows and the rule protocol's wall time; returns the protocol's (roots, episodes)."""
    sizes = (1, 8) if args.quick else (1, 64, 1024)
    for E in sizes:
        sps, steps = env_steps_per_second(bank, E, repeats=args.repeats if E < 1024 else max(1, args.repeats - 1))
        record["sim_env_steps_per_s"] = sps  # the largest E measured (1024; 8 with --quick)
        record["sim_E"] = E
        target = ">= 500,000" if E == 1024 else ""
        print(f"{f'simulator FIFO env-steps/s, E={E} ({steps} steps)':<44}{sps:>16,.0f}  {target}")
    roots, episodes = (1, 2) if args.quick else (5, 12)
    secs, rates = rule_protocol_seconds(bank, roots=roots, episodes=episodes)
    n_ep = 3 * 4 * roots * episodes
    print(f"{f'rule protocol FIFO+EDF+Oracle, {n_ep} episodes (s)':<44}{secs:>16.2f}  < 60")
    print(f"{'  mean success (%)':<44}{'  '.join(f'{k} {v:.1f}' for k, v in rates.items()):>16}")
    return roots, episodes


def mat_rows(bank, args, record: dict) -> None:
    """MAT rollout and PPO env-steps/s, with FM estimates and with no predictor, and their ratio to the simulator."""
    its = args.mat_iterations or (1 if args.quick else 3)
    quick = (
        ["rollout.n_episodes=16", "rollout.n_steps=8", "rollout.n_groups=2", "rollout.stagger=20"] if args.quick else []
    )
    for pred in ("fm", None):
        r = mat_throughput(bank, pred, iterations=its, recipe=args.recipe, overrides=quick, device=args.device)
        label = "FM estimates" if pred else "no predictor"
        what = f"{r['decoder']}, E={r['n_episodes']}x{r['n_steps']}, {r['update_epochs']}x{r['n_minibatches']} mb"
        print(f"{f'MAT rollout env-steps/s ({label}, 1 thread)':<44}{r['rollout']:>16,.0f}  ({args.recipe}: {what})")
        print(f"{f'MAT PPO training env-steps/s ({label})':<44}{r['train']:>16,.0f}  >= 15,000 (FM, default)")
        if pred == "fm":
            record.update(mat_rollout_env_steps_per_s=r["rollout"], mat_ppo_env_steps_per_s=r["train"], mat=r)
            if "fm_cache" in r:
                print(f"{'  FM cache hit rate (timed iterations)':<44}{r['fm_cache']['hit_rate']:>16.3f}")
    if "sim_env_steps_per_s" in record:
        record["ppo_over_sim"] = record["mat_ppo_env_steps_per_s"] / record["sim_env_steps_per_s"]
        print(f"{'  MAT PPO / simulator (same run)':<44}{record['ppo_over_sim']:>16.5f}  >= 1/80 = 0.0125")


if __name__ == "__main__":
    main()
