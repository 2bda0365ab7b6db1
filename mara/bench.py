"""``python -m mara.bench``: speed of the batched simulator and of the rule-based protocol.

Prints env-steps per second (one step of one episode = one env-step) under FIFO at E = 1, 64 and
1024 episodes, and the wall time of the full rule-based protocol (FIFO, EDF, Oracle over 3 task sets ×
4 loads × 5 roots × 12 episodes, episode generation included). Targets on the 2-core reference
machine: ≥ 500,000 env-steps/s at E = 1024; protocol < 60 s. MAT throughput (rollout alone and whole PPO iterations, env-steps/s, with and without
the FM predictor) is printed next to the simulator's (``--no-mat`` skips it). ``--clairvoyant`` adds the Clairvoyant
bound over the p = 0.04 protocol (target < 10 minutes). Predictor latency is part of the prediction
benchmark (``python -m mara.evaluate experiment=prediction``); ``--predictors`` times the shipped FM checkpoints
(paper v1 and issue-13 v3) interleaved in one process on the ID Table-1 prefixes (target ≤ 0.25 ms/prefix,
batched, one thread), so a loaded machine inflates both alike.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from mara.allocators.rules import EDF, FIFO
from mara.curves.bank import default_bank_path, load_bank, shipped_bank_path
from mara.sim.env import BatchedEnv
from mara.sim.workload import PAPER_TASK_SETS, EpisodeBatch, generate_episodes


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
        [generate_episodes(bank, bank.family_params, ts, p, r, episodes) for ts in PAPER_TASK_SETS.values() for p in loads for r in range(roots)]
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
    """Wall time of Clairvoyant (admission limit modelled) over the p = 0.04 protocol; returns (seconds, optimal count, episodes)."""
    from mara.allocators.clairvoyant_k import clairvoyant_k_batch

    ep = EpisodeBatch.concat([generate_episodes(bank, bank.family_params, ts, 0.04, r, episodes) for ts in PAPER_TASK_SETS.values() for r in range(roots)])
    t0 = time.perf_counter()
    res = clairvoyant_k_batch(ep.arrival, ep.deadline, ep.need, ep.n_tasks, n_nodes=7, max_active=10, time_limit_s=time_limit_s)
    return time.perf_counter() - t0, sum(r.optimal for r in res), len(res)


def predictor_ms_per_prefix(bank, variants=(None, "v3"), repeats: int = 7) -> tuple[dict, int]:
    """Best-of-``repeats`` ms per prefix of one batched ``predict_remaining`` call per FM checkpoint variant,
    interleaved, on the ID fm_val Table-1 queries (one thread)."""
    import torch
    from omegaconf import OmegaConf

    from mara.eval.prediction import CONF_PREDICTOR, build_queries
    from mara.families import ID_FAMILIES
    from mara.predictors import build_predictor
    from mara.predictors.data import observe

    torch.set_num_threads(1)
    q = build_queries(bank, [f for f in ID_FAMILIES if len(bank.rows(f, "fm_val"))], "fm_val", bank.family_params)
    S, L = observe(bank, q["rows"], q["n_obs"])
    args = (S, L, q["n_obs"], q["eps"], q["cap"], bank.batch_size[q["rows"]], bank.lr[q["rows"]])
    preds = {}
    for v in variants:
        cfg = OmegaConf.load(CONF_PREDICTOR / "fm.yaml")
        cfg.ckpt_variant = v
        preds[v or "v1"] = build_predictor(cfg, bank.path)
    best = {k: np.inf for k in preds}
    for _ in range(repeats):
        for k, p in preds.items():
            t0 = time.perf_counter()
            p.predict_remaining(*args)
            best[k] = min(best[k], time.perf_counter() - t0)
    return {k: 1e3 * v / len(q["rows"]) for k, v in best.items()}, len(q["rows"])


def mat_throughput(bank, predictor_name: str | None = "fm", n_episodes: int = 64, n_steps: int = 32, iterations: int = 3,
                   threads: int = 1) -> dict:
    """MAT env-steps/s with the training defaults (conf/mat/default.yaml): rollout only (sampling the policy in the
    staggered training env, FM estimates included) and a whole PPO iteration (rollout + GAE + update epochs)."""
    import torch
    from omegaconf import OmegaConf

    from mara.mat.losses import gae
    from mara.mat.nets import MATPolicy
    from mara.mat.rollout import EpisodeStream, TrainingEnv, collect_rollout
    from mara.mat.train import CONF_DIR, build_named_predictor

    torch.set_num_threads(threads)
    c = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "mat" / "default.yaml"), resolve=True)
    predictor = build_named_predictor(predictor_name, bank.path)
    stream = EpisodeStream(bank, bank.family_params, "ID", 0.04, 424242, n_episodes)
    env = TrainingEnv(stream, bank, predictor, "dense", n_groups=c["rollout"]["n_groups"], stagger=c["rollout"]["stagger"])
    policy = MATPolicy(n_slots=10, n_nodes=7, **c["net"])
    opt = torch.optim.Adam(policy.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    ppo = c["ppo"]
    t_roll = t_all = 0.0
    steps = 0
    for _ in range(iterations):
        t0 = time.perf_counter()
        buf = collect_rollout(policy, env, n_steps, g, c["rollout"]["scale"])
        t1 = time.perf_counter()
        adv, ret = gae(buf.rewards, buf.values, buf.dones, buf.last_value, ppo["gamma"], ppo["gae_lambda"])
        live = buf.live.reshape(-1)
        flat = lambda x: x.reshape(-1, *x.shape[2:])[live]  # noqa: E731
        tok, pres, act, ret_ = flat(buf.tokens), flat(buf.present), flat(buf.actions), flat(ret)
        for _ in range(ppo["update_epochs"]):
            for idx in torch.tensor_split(torch.randperm(len(act), generator=g), ppo["n_minibatches"]):
                logp, ent, v = policy.evaluate(tok[idx], pres[idx], act[idx])
                loss = -(logp * flat(adv)[idx]).mean() + 0.5 * (v - ret_[idx]).pow(2).mean() - 0.01 * ent.mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        t2 = time.perf_counter()
        t_roll += t1 - t0
        t_all += t2 - t0
        steps += int(live.sum())
    return {"rollout": steps / t_roll, "train": steps / t_all}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="MARA benchmarks (simulator and protocol speed)")
    ap.add_argument("--bank", default=None, help="bank path or shipped name (default: the shipped default bank)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--clairvoyant", action="store_true", help="also time Clairvoyant over the p=0.04 protocol")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (smoke test of the benchmark itself)")
    ap.add_argument("--predictors", action="store_true", help="only time the shipped FM checkpoints (v1, v3)")
    ap.add_argument("--no-mat", action="store_true", help="skip the MAT rollout/training throughput")
    args = ap.parse_args(argv)
    bank = load_bank(shipped_bank_path(args.bank) if args.bank else default_bank_path())
    print(f"bank: {bank.path} ({len(bank)} curves)")
    print(f"{'benchmark':<44}{'value':>16}  target")
    if args.predictors:
        ms, n = predictor_ms_per_prefix(bank)
        for k, v in ms.items():
            print(f"{f'FM {k} ms/prefix, {n} ID prefixes batched':<44}{v:>16.4f}  <= 0.25")
        return
    sizes = (1, 8) if args.quick else (1, 64, 1024)
    for E in sizes:
        sps, steps = env_steps_per_second(bank, E, repeats=args.repeats if E < 1024 else max(1, args.repeats - 1))
        target = ">= 500,000" if E == 1024 else ""
        print(f"{f'simulator FIFO env-steps/s, E={E} ({steps} steps)':<44}{sps:>16,.0f}  {target}")
    roots, episodes = (1, 2) if args.quick else (5, 12)
    secs, rates = rule_protocol_seconds(bank, roots=roots, episodes=episodes)
    n_ep = 3 * 4 * roots * episodes
    print(f"{f'rule protocol FIFO+EDF+Oracle, {n_ep} episodes (s)':<44}{secs:>16.2f}  < 60")
    print(f"{'  mean success (%)':<44}{'  '.join(f'{k} {v:.1f}' for k, v in rates.items()):>16}")
    if not args.no_mat:
        its = 1 if args.quick else 3
        for pred in ("fm", None):
            r = mat_throughput(bank, pred, n_episodes=16 if args.quick else 64, n_steps=8 if args.quick else 32, iterations=its)
            label = "FM estimates" if pred else "no predictor"
            print(f"{f'MAT rollout env-steps/s ({label}, 1 thread)':<44}{r['rollout']:>16,.0f}")
            print(f"{f'MAT PPO training env-steps/s ({label})':<44}{r['train']:>16,.0f}")
    if args.clairvoyant:
        secs, n_opt, n = clairvoyant_seconds(bank, roots=roots, episodes=episodes)
        print(f"{f'Clairvoyant p=0.04, {n} episodes (s)':<44}{secs:>16.2f}  < 600   ({n_opt}/{n} proven optimal)")


if __name__ == "__main__":
    main()
