"""Convert a checkpoint to the package's load-as-data form and record the command that made it.

    python -m mara.ckpt_convert OLD.ckpt [--out NEW.ckpt] [--recipe "python -m mara.train ..."]
    python -m mara.ckpt_convert --shipped        # the files in mara/data/checkpoints, with their recipes
    python -m mara.ckpt_convert RUN/best.ckpt --out SHIPPED.ckpt --recipe mat=suite --policy-only   # ship a policy

What changes: a ``kind`` field (``policy`` | ``fm`` | ``qr``), a ``recipe`` field (the command or recipe that trained
it; kept when not given), hyper-parameters as plain containers, and a MAT training state stored as pickled bytes
inside a tensor (older ``last.ckpt`` files) rewritten as tensors and plain values. Weights are copied unchanged and
checked tensor by tensor against the source before the file is replaced. The source must already load with
``weights_only=True`` (every checkpoint this package wrote does); the old training state is decoded by an unpickler
that can only rebuild numpy arrays and the simulator's two state classes, so converting a file runs no code from it.
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import sys
from pathlib import Path

import torch

from mara.core.config import SHIPPED_CKPT_DIR, ConfigError
from mara.core.safe_load import CheckpointError, load_checkpoint, plain_lightning_checkpoint, to_plain
from mara.mat.rollout import _STATE_CLASSES

_LIVE = (
    "python -m mara.live action=export_bank bank_out=outputs/live_bank/live_bank.parquet && "
    "python -m mara.train stage=policy bank.path=outputs/live_bank/live_bank.parquet sim.nodes=2 sim.max_active=4 "
    "sim.steps=120 mat.workload.load=0.05 mat.rollout.scale=88 mat.total_env_steps=40000 "
    "mat.validation.every_n_iterations=4 seed=0"
)
#: the recipe of every shipped checkpoint: a MAT recipe (``mat=<name>``, conf/mat/) for the policies evaluated as
#: MARA / MARA-QR, else the command that trained the file (docs/predictor.md, docs/live.md)
SHIPPED_RECIPES = {
    **{f"mara_zoo_seed{s}.ckpt": "mat=band" for s in range(3)},
    **{f"mara_qr_zoo_seed{s}.ckpt": "mat=default" for s in range(3)},
    **{f"mara_suite_zoo_seed{s}.ckpt": "mat=suite" for s in range(3)},
    **{f"mara_nodes_zoo_seed{s}.ckpt": "mat=suite_nodes" for s in range(3)},
    **{
        f"mara_suite_ppo_zoo_seed{s}.ckpt": "mat=suite_ppo "
        f"mat.init_from=mara/data/checkpoints/mara_suite_zoo_seed{s}.ckpt"
        for s in range(3)
    },
    "fm_zoo.ckpt": "python -m mara.train stage=predictor predictor.net.feature_set=v1",
    "fm_zoo_v3.ckpt": "python -m mara.train stage=predictor trainer.max_epochs=40",
    "fm_parametric.ckpt": "python -m mara.train stage=predictor bank=parametric predictor.net.feature_set=v1",
    "qr_zoo.ckpt": "python -m mara.predictors.quantile_train",
    "lcpfn_prior.ckpt": "python -m mara.predictors.lcpfn_train stage=prior",
    "lcpfn_zoo.ckpt": "python -m mara.predictors.lcpfn_train stage=finetune init=<lcpfn_prior.ckpt> "
    "predictor.finetune.steps=1200 predictor.finetune.save_every=100 (kept: step 1000)",
    "mara_live.ckpt": _LIVE,
    "qr_ctx_zoo.ckpt": "python -m mara.predictors.context_train",
    "mara_trace.ckpt": "python -m mara.train experiment=trace_mara",
}


class _StateUnpickler(pickle.Unpickler):
    """Reads the pickled MAT training state of older checkpoints: numpy arrays and scalars, ``EpisodeBatch`` and
    ``Observation`` only (rebuilt from their attributes, no constructor runs); any other global is refused."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("mara.sim.workload", "EpisodeBatch"),
        ("mara.sim.env", "Observation"),  # where older files name it
        ("mara.sim.observation", "Observation"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"the old training state names {module}.{name}, which is not plain data")
        return super().find_class(module, name)


def _old_training_state(blob: torch.Tensor):
    try:
        state = _StateUnpickler(io.BytesIO(blob.numpy().tobytes())).load()
    except Exception as exc:
        raise CheckpointError(
            f"its MAT training state cannot be converted ({' '.join(str(exc).split())[:120]})"
        ) from None
    return to_plain(state, _STATE_CLASSES)


def _kind(ckpt: dict) -> str:
    if ckpt.get("kind") == "lcpfn":  # LC-PFN files are written with their kind (and recipe) from the start
        return "lcpfn"
    if "hyper_parameters" in ckpt:
        return "policy"
    if "members" in ckpt or isinstance(ckpt.get("hparams"), dict) and "levels" in ckpt["hparams"]:
        return "qr"
    if "hparams" in ckpt and "state_dict" in ckpt:
        return "fm"
    raise CheckpointError("not a MAT policy, FM or decision-head checkpoint (no hyper_parameters/hparams/members)")


def _weights(ckpt: dict) -> dict:
    """Every tensor of a checkpoint but those of the MAT training state's environment (rewritten by ``convert``)."""
    state = ckpt.get("mat_state")
    if isinstance(state, dict):
        ckpt = {**ckpt, "mat_state": {k: v for k, v in state.items() if k != "env"}}
    return _tensors(ckpt)


def _tensors(obj, prefix: str = "") -> dict:
    """Every tensor in a nested checkpoint, by its path of keys (to compare source and result)."""
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_tensors(v, f"{prefix}/{k}"))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(_tensors(v, f"{prefix}/{i}"))
    return out


POLICY_KEYS = ("state_dict", "hyper_parameters", "epoch", "global_step", "pytorch-lightning_version")


def convert(src, out=None, recipe: str | None = None, policy_only: bool = False) -> Path:
    """Rewrite checkpoint ``src`` (to ``out``, default in place) in the load-as-data form with ``recipe``; returns the
    written path. ``policy_only``: a MAT checkpoint keeps its weights and hyper-parameters only (no optimiser, rollout
    or validation state: a policy to evaluate and ship, not to resume). Raises ``CheckpointError`` (one line) for a
    file it cannot convert."""
    src = Path(src)
    out = Path(out) if out is not None else src
    ckpt = load_checkpoint(src, "checkpoint")
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{src} is not a checkpoint dict")
    try:
        kind = _kind(ckpt)
    except CheckpointError as exc:
        raise CheckpointError(f"{src} is {exc}") from None
    if policy_only and kind != "policy":
        raise CheckpointError(f"{src} is not a MAT policy checkpoint (--policy-only)")
    if policy_only:
        ckpt = {k: ckpt[k] for k in POLICY_KEYS if k in ckpt}
    before = _weights(ckpt)
    new = dict(ckpt)
    if kind == "policy":
        plain_lightning_checkpoint(new)
        env = (new.get("mat_state") or {}).get("env") or {}
        if "blob" in env:
            try:
                new["mat_state"] = {**new["mat_state"], "env": _old_training_state(env["blob"])}
            except CheckpointError as exc:
                raise CheckpointError(f"{src}: {exc}") from None
    elif kind == "qr" and "members" in new:
        new["members"] = [{**m, "kind": "qr"} for m in new["members"]]
    new["kind"] = kind
    new["recipe"] = recipe if recipe is not None else ckpt.get("recipe")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    torch.save(new, tmp)
    after = _weights(load_checkpoint(tmp, "converted checkpoint"))
    if before.keys() != after.keys() or any(
        not torch.equal(before[k], after[k]) or before[k].dtype != after[k].dtype for k in before
    ):
        tmp.unlink()
        raise CheckpointError(f"{src}: the converted weights differ from the source (file left unchanged)")
    os.replace(tmp, out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mara.ckpt_convert", description=__doc__.split("\n")[0])
    p.add_argument("src", nargs="*", help="checkpoint(s) to convert")
    p.add_argument("--out", help="where to write (one source only; default: in place)")
    p.add_argument("--recipe", help="the command or recipe that trained the file (kept when not given)")
    p.add_argument("--shipped", action="store_true", help="convert the package's checkpoints with their recipes")
    p.add_argument(
        "--policy-only",
        action="store_true",
        help="a MAT policy: keep weights and hyper-parameters only (what a shipped policy needs; it cannot be resumed)",
    )
    args = p.parse_args(argv)
    try:
        if args.policy_only and args.shipped:
            raise ConfigError("--policy-only converts the checkpoints given, not --shipped")
        if args.shipped:
            jobs = [
                (SHIPPED_CKPT_DIR / name, None, r)
                for name, r in SHIPPED_RECIPES.items()
                if (SHIPPED_CKPT_DIR / name).exists()
            ]
        elif args.src and not (args.out and len(args.src) > 1):
            jobs = [(s, args.out, args.recipe) for s in args.src]
        else:
            raise ConfigError("give one or more checkpoints (--out with a single one), or --shipped")
        for src, out, recipe in jobs:
            print(f"{convert(src, out, recipe, args.policy_only)}  recipe: {recipe or '(kept)'}")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
