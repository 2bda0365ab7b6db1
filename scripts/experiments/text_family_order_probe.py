"""Can ALSTM_Text reach Table 6's ε (cumulative-average CE ≈ 0.02) within its budget?

Trains the zoo's ALSTM_Text model on the real IMDB training split with the A.2 recipe (Adam, no weight
decay, no scheduler, mean-reduced CE, full batches of 4 or 8) under two data orders:

* ``shuffled``: the generator's order (reshuffled every epoch from the seed);
* ``file``: the reviews in the order they are read (``train/pos`` then ``train/neg``), unshuffled, so
  the first 12,500 examples all carry label 1 — what a loader that forgets to shuffle would feed.

and prints the cumulative-average loss L(s) at the budget range ends (312, 345) and at the cap (690).

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python scripts/experiments/text_family_order_probe.py --data-root ../shared/data
    ... --orders file --job-recipes 8 --steps 345 --calibrate   # the generator's recipes, ε calibrated on them
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from tasks_zoo.registry import build_net, load_dataset, load_zoo_config


def run(
    family: str, order: str, batch: int, lr: float, steps: int, seed: int, data_root: str, cache_dir: str
) -> np.ndarray:
    """Per-batch losses [steps] of one run."""
    cfg = load_zoo_config(family)
    ds = load_dataset("imdb", "real", data_root, cache_dir, False)
    x, y = ds.x, ds.y
    n = len(y)
    torch.manual_seed(seed)
    net = build_net(cfg.model)
    opt = torch.optim.Adam(net.parameters(), lr=lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    losses, perm, pos = [], None, n
    for _ in range(steps):
        if pos + batch > n:
            perm = torch.randperm(n, generator=gen) if order == "shuffled" else torch.arange(n)
            pos = 0
        idx = perm[pos : pos + batch]
        pos += batch
        loss = F.cross_entropy(net(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return np.array(losses)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-root", default="data_cache")
    ap.add_argument("--cache-dir", default="data_cache", help="where an archive in --data-root is unpacked")
    ap.add_argument("--family", default="ALSTM_Text_1")
    ap.add_argument("--steps", type=int, default=690)
    ap.add_argument("--orders", default="file,shuffled")
    ap.add_argument("--configs", default="4:1e-3,8:3e-4", help="batch:lr pairs")
    ap.add_argument(
        "--job-recipes",
        type=int,
        default=0,
        help="instead of --configs: the generator's recipes (seed, batch, lr) of pool jobs 0..N-1",
    )
    ap.add_argument(
        "--calibrate", action="store_true", help="calibrate ε on the runs of each order (as mara.calibrate does)"
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(f"| family | order | batch | lr | L(312) | L(345) | L({args.steps}) | mean last-50 batch loss | s |")
    print("|---|---|---|---|---|---|---|---|---|")
    if args.job_recipes:
        from mara.curves.generation import Job, job_recipe

        recipes = [job_recipe(Job(args.family, "pool", i, "real")) for i in range(args.job_recipes)]
    else:
        recipes = [
            (1000 + i, int(p.split(":")[0]), float(p.split(":")[1])) for i, p in enumerate(args.configs.split(","))
        ]
    for order in args.orders.split(","):
        records = []
        for seed, b, lr in recipes:
            t0 = time.time()
            ls = run(
                args.family, order, b, lr, args.steps, seed=seed, data_root=args.data_root, cache_dir=args.cache_dir
            )
            cum = np.cumsum(ls) / np.arange(1, len(ls) + 1)
            print(
                f"| {args.family} | {order} | {b} | {lr:.3g} | {cum[311]:.4f} | {cum[344]:.4f} | {cum[-1]:.4f} | "
                f"{ls[-50:].mean():.4f} | {time.time() - t0:.0f} |",
                flush=True,
            )
            records.append(
                {
                    "curve_id": f"{args.family}/{order}/{seed}",
                    "family": args.family,
                    "split": "pool",
                    "data_source": "real",
                    "batch_size": b,
                    "lr": lr,
                    "seed": seed,
                    "losses": ls,
                    "meta": {},
                }
            )
        if args.calibrate:
            import tempfile

            from mara.curves.bank import load_bank, write_bank
            from mara.curves.calibrate import calibrate_family_params
            from mara.curves.families import PAPER_FAMILY_PARAMS

            with tempfile.TemporaryDirectory() as tmp:
                bank = load_bank(write_bank(f"{tmp}/probe.parquet", records))
                p = calibrate_family_params(bank, PAPER_FAMILY_PARAMS, target=0.70)[args.family]
            print(
                f"calibrated ε ({order}, {len(records)} runs, Oracle target 0.70): {p['eps']:.4f} "
                f"(Table 6: {PAPER_FAMILY_PARAMS[args.family]['eps']})",
                flush=True,
            )


if __name__ == "__main__":
    main()
