"""``python -m mara.readme_tables run=OUT readme=docs/results.md``: the measured tables of docs/results.md from a
re-measurement folder.

``OUT`` is the folder ``scripts/ship_real_bank.sh`` fills (or any folder with the same layout). Each section below
is written between its ``<!-- NAME:begin -->`` / ``<!-- NAME:end -->`` markers, headed by the command that measured
it; a section whose inputs are not in ``OUT`` is left as it is and named on stdout, so the command can run while
the measurements are still coming in. ``results`` (``mara.report``) and ``fidelity`` (``mara.fidelity``) are
written by their own commands.

| section | read from ``OUT`` |
|---|---|
| ``rules`` | ``rules/results.json``, ``rules_stress/results.json`` |
| ``prediction`` | ``paper/prediction/prediction.json`` (paper inputs), ``prediction_v3/prediction.json`` |
| ``lofo`` | ``lofo/lofo.json`` |
| ``lara_sweep`` | ``lara_sweep/<reading>/results.json`` |
| ``live`` | ``live/live_results.md``, ``live6/live_results.md`` |
| ``imitation`` | ``paper/policy/MARA/seed*/checkpoints/imitation.json`` and ``validation.json`` |
| ``checkpoints`` | ``fm_v1/predictor/fm.ckpt``, ``fm_v3/predictor/fm.ckpt``,
``live_mara/policy/checkpoints/validation.json`` |"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mara.core.files import write_text_atomic
from mara.core.safe_load import load_checkpoint
from mara.eval.lofo import lofo_markdown
from mara.report.sections import replace_section

#: scripts/experiments/lara_sweep.sh's readings, in the README's order: (folder name, what it sets)
LARA_READINGS = [
    ("faithful", "faithful (`LARA.yaml`: reserve 1 cold node, leftover warm LL → cold)"),
    ("plan_all", "`plan_nodes: all`"),
    ("dispatch_edf", "`dispatch: edf`"),
    ("no_reserve", "`cold_reserve: 0`"),
    ("cold_first", "`leftover: [cold_edf, warm_least_laxity]`"),
    ("cold_first_plan_all", "same + `plan_nodes: all`"),
    ("no_reserve_cold_first", "`cold_reserve: 0`, `leftover: [cold_edf, warm_least_laxity]`"),
    ("no_reserve_cold_first_edf", "`cold_reserve: 0`, `leftover: [cold_edf, warm_edf]`"),
]
RULES = [
    ("Slack-FM", "Slack-FM (predictor-guided rule)"),
    ("LARA-FM-best", "LARA-FM-best"),
    ("LARA-FM", "LARA-FM (faithful reading)"),
    ("LARA-best", "LARA-best (WLS)"),
    ("LARA", "LARA (faithful reading)"),
]
LOADS = ("0.04", "0.05", "0.06", "0.07")
RULES_METHODS = "'methods=[Slack-FM,LARA,LARA-FM,LARA-best,LARA-FM-best]'"


def _json(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def _cell(cell: dict | None, std: bool = True) -> str:
    if not cell or cell.get("mean") is None:
        return "–"
    return f"{cell['mean']:.2f} ± {cell['std']:.2f}" if std else f"{cell['mean']:.2f}"


def _average(summary: dict, method: str) -> dict:
    """A method's per-load cells: its ``Average`` over task sets, or its only task set."""
    per_ts = summary.get(method) or {}
    return per_ts.get("Average") or (next(iter(per_ts.values())) if per_ts else {})


def rules_section(run: Path) -> str | None:
    ev, st = _json(run / "rules" / "results.json"), _json(run / "rules_stress" / "results.json")
    if ev is None:
        return None
    lines = [
        f"Measured by `python -m mara.evaluate {RULES_METHODS}` and the same with `scenario=stress` (the shipped FM "
        "checkpoint `fm_zoo.ckpt`; 3 task sets × 5 roots × 12 episodes per load). Mean ± std of success (%) "
        "over roots:",
        "",
        "| Method | " + " | ".join(f"p = {ld}" for ld in LOADS) + " | stress |",
        "|---" * (len(LOADS) + 2) + "|",
    ]
    for m, label in RULES:
        if m not in ev["summary"]:
            continue
        cells = _average(ev["summary"], m)
        stress = _average(st["summary"], m) if st else {}
        s = _cell(next(iter(stress.values()))) if stress else "–"
        lines.append(f"| {label} | " + " | ".join(_cell(cells.get(ld)) for ld in LOADS) + f" | {s} |")
    return "\n".join(lines) + "\n"


def prediction_section(run: Path) -> str | None:
    v1, v3 = _json(run / "paper" / "prediction" / "prediction.json"), _json(run / "prediction_v3" / "prediction.json")
    if v1 is None and v3 is None:
        return None
    sources = [("FM (paper inputs)", v1, "FM"), ("FM v3", v3, "FM"), ("WLS", v3 or v1, "WLS")]
    task_sets = list(((v1 or v3)["results"]).keys())
    lines = [
        "Measured by `python -m mara.train experiment=paper` (its `prediction/` folder: the paper's predictor, "
        "`fm_zoo.ckpt`) and `python -m mara.evaluate experiment=prediction predictors.fm.ckpt_variant=v3` "
        "(`fm_zoo_v3.ckpt`). ID on `fm_val` curves, OOD on pool curves; coverage = how often the true crossing "
        "lies inside the q10–q90 band; latency of one batched call per prefix on one thread.",
        "",
        "| Task set | Method | MAE (batches) | Budget acc. (%) | q10–q90 coverage (%) | ms / prefix |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for ts in task_sets:
        for label, src, key in sources:
            r = (src or {}).get("results", {}).get(ts, {}).get(key)
            if r is None:
                lines.append(f"| {ts} | {label} | – | – | – | – |")
                continue
            cov = f"{100 * r['coverage']:.1f}" if "coverage" in r else "–"
            lines.append(
                f"| {ts} | {label} | {r['mae']:.2f} | {100 * r['budget_acc']:.2f} | {cov} | {r['ms_per_prefix']:.3g} |"
            )
    return "\n".join(lines) + "\n"


def lofo_section(run: Path) -> str | None:
    data = _json(run / "lofo" / "lofo.json")
    if data is None:
        return None

    cfg = data.get("fm_cfg") or {}
    feat = (cfg.get("net") or {}).get("feature_set", "v3")
    return (
        f"Measured by `python -m mara.evaluate experiment=prediction_lofo` ({feat} inputs; per fold an FM trained on "
        "the other ID families, evaluated on the held-out family's fm_val + pool curves):\n\n"
        + lofo_markdown(data["folds"])
    )


def lara_sweep_section(run: Path) -> str | None:
    got = {name: _json(run / "lara_sweep" / name / "results.json") for name, _ in LARA_READINGS}
    if not any(got.values()):
        return None
    lines = [
        "Measured by `scripts/experiments/lara_sweep.sh OUT` on validation roots 1000–1004 "
        "(3 task sets × 12 episodes × 4 loads = 720 episodes per reading). Mean success (%) at p = "
        + " / ".join(LOADS)
        + ":",
        "",
        "| reading (options) | LARA (WLS) | LARA-FM |",
        "|---|---|---|",
    ]
    for name, label in LARA_READINGS:
        res = got[name]
        cells = []
        for m in ("LARA", "LARA-FM"):
            per = _average(res["summary"], m) if res else {}
            cells.append(" / ".join(_cell(per.get(ld), std=False) for ld in LOADS) if per else "–")
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


def live_section(run: Path) -> str | None:
    parts = []
    for folder, command in (
        ("live", "python -m mara.live"),
        ("live6", "python -m mara.live 'methods=[MARA,Slack-FM,FIFO,EDF,LARA,LARA-FM]' live.episodes=3 live.load=0.1"),
    ):
        p = run / folder / "live_results.md"
        if p.exists():
            body = p.read_text().replace("# Live run\n", "", 1).strip()
            parts.append(f"`{command}`:\n\n{body}\n")
    return "\n".join(parts) if parts else None


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def imitation_section(run: Path) -> str | None:
    seeds = sorted((run / "paper" / "policy" / "MARA").glob("seed*/checkpoints/validation.json"))
    if not seeds:
        return None
    lines = [
        "Measured by `python -m mara.train experiment=paper` (its three MARA trainings, "
        "`policy/MARA/seed*/checkpoints/imitation.json` and `validation.json`). Agreement = the argmax policy serves "
        "the same set of slots as the teacher; *fresh* = on the states the cloned policy itself visits, before "
        "training on them. Validation success (%) on roots 1000–1004 (ID, p = 0.04), the same episodes for the "
        "rules:",
        "",
        "| seed | states | agreement after BC (%) | after DAgger (%) | fresh states (%) | cloned policy (it. 0) | "
        "validation over PPO | chosen (iteration, env steps) | Slack-FM | FIFO | EDF | LARA |",
        "|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|",
    ]
    for path in seeds:
        val = _json(path)
        im = _json(path.with_name("imitation.json")) or {"rounds": []}
        rounds = im["rounds"]
        hist = val.get("history") or []
        it0 = next((h["val_success_rate"] for h in hist if h["iteration"] == 0), None)
        later = ", ".join(_pct(h["val_success_rate"]) for h in hist if h["iteration"] > 0) or "–"
        best = next((h for h in hist if h["iteration"] == val.get("best_iteration")), None)
        chosen = f"{val.get('best_iteration')}, {best['env_steps']:,}" if best else str(val.get("best_iteration"))
        base = val.get("val_baselines") or {}
        lines.append(
            f"| {path.parent.parent.name.removeprefix('seed')} | {rounds[-1]['states'] if rounds else '–'} | "
            f"{_pct(rounds[0]['agreement_train']) if rounds else '–'} | "
            f"{_pct(rounds[-1]['agreement_train']) if len(rounds) > 1 else '–'} | "
            f"{_pct(rounds[-1].get('agreement_new_before_training')) if len(rounds) > 1 else '–'} | {_pct(it0)} | "
            f"{later} | {chosen} | " + " | ".join(_pct(base.get(m)) for m in ("Slack-FM", "FIFO", "EDF", "LARA")) + " |"
        )
    return "\n".join(lines) + "\n"


FM_CHECKPOINTS = [
    (
        "fm_v1",
        "fm_zoo.ckpt (paper inputs, the default)",
        "python -m mara.train stage=predictor predictor=fm predictor.net.feature_set=v1",
    ),
    ("fm_v3", "fm_zoo_v3.ckpt (v3 inputs)", "python -m mara.train stage=predictor predictor=fm trainer.max_epochs=40"),
]


def checkpoints_section(run: Path) -> str | None:
    fms = [(label, cmd, run / folder / "predictor" / "fm.ckpt") for folder, label, cmd in FM_CHECKPOINTS]
    live = _json(run / "live_mara" / "policy" / "checkpoints" / "validation.json")
    if not any(p.exists() for *_, p in fms) and live is None:
        return None
    lines = []
    if any(p.exists() for *_, p in fms):
        lines += [
            "| shipped FM checkpoint | command | epochs | val. FM loss | val. MAE FM / WLS (batches) | "
            "conformal offset | "
            "training wall time (s) |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for label, cmd, path in fms:
            if not path.exists():
                continue
            x = load_checkpoint(path, "FM checkpoint", mmap=True).get("extra", {})
            f = lambda k, fmt, x=x: format(x[k], fmt) if isinstance(x.get(k), (int, float)) else "–"  # noqa: E731
            lines.append(
                f"| `{label.split(' ', 1)[0]}` {label.split(' ', 1)[1]} | `{cmd}` | {x.get('epochs', '–')} | "
                f"{f('val/fm_loss', '.3f')} | {f('val/mae_fm', '.1f')} / {f('val/mae_wls', '.1f')} | "
                f"{f('band_offset', '.3f')} | {f('wall_s', '.0f')} |"
            )
        lines.append("")
    if live is not None:
        hist = live.get("history") or []
        best = next((h for h in hist if h["iteration"] == live.get("best_iteration")), None)
        base = ", ".join(f"{m} {_pct(v)}" for m, v in (live.get("val_baselines") or {}).items())
        lines.append(
            f"`mara_live.ckpt` (the live-mode policy, M = 2, K = 4, trained on the live-scaled bank): best validation "
            f"success {_pct(live.get('val_success_rate'))} % at iteration {live.get('best_iteration')}"
            + (f" ({best['env_steps']:,} env steps)" if best else "")
            + f"; the rules on the same episodes: {base}."
        )
    return "\n".join(lines) + "\n"


SECTIONS = {
    "rules": rules_section,
    "prediction": prediction_section,
    "lofo": lofo_section,
    "lara_sweep": lara_sweep_section,
    "live": live_section,
    "imitation": imitation_section,
    "checkpoints": checkpoints_section,
}


def fill_readme(run: Path, readme: Path, names=None) -> dict[str, bool]:
    """Rewrite every section whose inputs are in ``run``; returns {section: written}. Every marker pair a written
    section needs is checked before the README is touched (missing markers: ValueError, README unchanged)."""

    run, readme = Path(run), Path(readme)
    if not run.is_dir():
        raise FileNotFoundError(f"no measurement folder {run} (scripts/ship_real_bank.sh OUT fills it)")
    if not readme.exists():
        raise FileNotFoundError(f"README {readme} does not exist")
    unknown = sorted(set(names or ()) - set(SECTIONS))
    if unknown:
        raise ValueError(f"unknown README section(s) {unknown}; known: {sorted(SECTIONS)}")
    text, written = readme.read_text(), {}
    for name in names or SECTIONS:
        section = SECTIONS[name](run)
        written[name] = section is not None
        if section is not None:
            text = replace_section(text, section, name)
    if any(written.values()):
        write_text_atomic(readme, text)
    return written


def main(argv: list[str]) -> int:
    args = dict(a.split("=", 1) for a in argv if "=" in a)
    bad = [a for a in argv if "=" not in a] + sorted(set(args) - {"run", "readme", "sections"})
    if bad or "run" not in args:
        print(
            "usage: python -m mara.readme_tables run=OUT [readme=docs/results.md] [sections=rules,lofo,...]",
            file=sys.stderr,
        )
        return 2
    names = [s for s in args.get("sections", "").split(",") if s] or None
    try:
        written = fill_readme(Path(args["run"]), Path(args.get("readme", "docs/results.md")), names)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for name, ok in written.items():
        print(f"{name}: {'written' if ok else 'left as it is (its inputs are not in ' + args['run'] + ')'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
