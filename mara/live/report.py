"""Live-run report: ``live_results.json`` (schema mara.live/1), ``live_results.md``, the node-timeline figure."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from mara.live.settings import LiveSettings
from mara.sim.env import TaskStatus

SCHEMA = "mara.live/1"
STATUS = {TaskStatus.SUCCEEDED: "succeeded", TaskStatus.FAILED: "failed"}


def say(msg: str) -> None:
    """A live-mode progress or note line on stderr, flushed at once (stdout stays free for results)."""
    print(msg, file=sys.stderr, flush=True)


def compare_decisions(live: list, replayed: list) -> dict:
    """Step-by-step agreement of two decision sequences (job per node, -1 idle)."""
    n = min(len(live), len(replayed))
    same = [live[i] == replayed[i] for i in range(n)]
    first = next((i for i, ok in enumerate(same) if not ok), None)
    if first is None and len(live) != len(replayed):
        first = n
    return {
        "identical": first is None,
        "first_mismatch_step": first,
        "steps_live": len(live),
        "steps_replay": len(replayed),
        "matching_steps": int(sum(same)),
    }


def summarize(runs: list[dict]) -> dict:
    """Per method: mean success, utilisation, wall time, allocator ms/step, and the sim-versus-live agreement."""
    out = {}
    for m in dict.fromkeys(r["method"] for r in runs):
        rs = [r for r in runs if r["method"] == m]
        succ, n = sum(r["succeeded"] for r in rs), sum(r["n_tasks"] for r in rs)
        row = {
            "episodes": len(rs),
            "jobs": n,
            "succeeded": succ,
            "success_rate": succ / n if n else None,
            "utilization": float(np.mean([r["utilization"] for r in rs])),
            "wall_s": float(sum(r["wall_s"] for r in rs)),
            "batch_s": float(sum(r["batch_s"] for r in rs)),
            "batches": int(sum(sum(r["batches"]) for r in rs)),
            "alloc_ms_per_step": float(np.mean([r["alloc_ms_per_step"] for r in rs])),
            "worker_failures": sum(len(r["worker_failures"]) for r in rs),
        }
        if any("switches" in r for r in rs):  # heterogeneous nodes / switch costs
            row |= {k: int(sum(r[k] for r in rs)) for k in ("switches", "setup_steps", "reloads")}
            row |= {k: float(sum(r[k] for r in rs)) for k in ("reload_s", "setup_s", "stretch_s")}
        reps = [r.get("replay") for r in rs if r.get("replay")]
        if reps:
            rsucc = sum(p["succeeded"] for p in reps)
            row["replay"] = {
                "succeeded": rsucc,
                "success_rate": rsucc / n if n else None,
                "gap_live_minus_replay": (succ - rsucc) / n if n else None,
                "decisions_identical": all(p["agreement"]["identical"] for p in reps),
                "outcomes_identical": all(p["status"] == r["status"] for p, r in zip(reps, rs)),
                "matching_steps": int(sum(p["agreement"]["matching_steps"] for p in reps)),
                "steps": int(sum(p["agreement"]["steps_live"] for p in reps)),
                "beyond_record": int(sum(p["beyond_record"] for p in reps)),
            }
            if "switches" in row:
                row["replay"] |= {k: int(sum(p[k] for p in reps)) for k in ("switches", "setup_steps")}
        out[m] = row
    return out


def markdown(res: dict) -> str:
    c = res["config"]
    lines = [
        "# Live run",
        "",
        f"{c['n_jobs']} real training jobs ({', '.join(c['families'])}, {res['data']} data) per method; "
        f"M = {c['sim']['nodes']} nodes, K = {c['sim']['max_active']}, T = {c['sim']['steps']}, p = {c['load']}, "
        f"root {c['root']}, {c['episodes']} episode(s), budgets x {c['time_scale']}, ε calibrated on "
        f"{res.get('calibration_bank')}.",
        "",
    ]
    sim = c["sim"]
    if sim.get("node_speed") is not None or (sim.get("switch_cost") or 0) > 0:
        lines += [
            (
                f"Node speeds {sim.get('node_speed') or [1] * sim['nodes']} batches per step (a slower node's "
                "batches are "
                f"stretched by the sleep factor s_max / s), switch cost {sim.get('switch_cost') or 0} set-up steps."
            ),
            "",
        ]
    for note in res["notes"]:
        lines.append(f"- note: {note}")
    lines += [
        "",
        "| Method | Success (%) | Node util. (%) | Wall (s) | Batches | Allocator ms/step | Replayed "
        "success (%) | Decisions identical | Outcomes identical |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, s in res["summary"].items():
        rp = s.get("replay")
        pct = lambda x: "–" if x is None else f"{100 * x:.1f}"  # noqa: E731
        decided = (
            "–"
            if not rp
            else "yes"
            if rp["decisions_identical"]
            else f"no ({rp['matching_steps']}/{rp['steps']} steps)"
        )
        lines.append(
            f"| {m} | {pct(s['success_rate'])} ({s['succeeded']}/{s['jobs']}) | "
            f"{100 * s['utilization']:.1f} | {s['wall_s']:.1f} | "
            f"{s['batches']} | {s['alloc_ms_per_step']:.2f} | {pct(rp['success_rate']) if rp else '–'} | "
            f"{decided} | "
            f"{('yes' if rp['outcomes_identical'] else 'no') if rp else '–'} |"
        )
    het = {m: s for m, s in res["summary"].items() if "switches" in s}
    if het:
        lines += [
            "",
            (
                "| Method | Switches (live / replay) | Set-up node-steps (live / replay) | Set-up node-s (of "
                "it reloads) | "
                "Sleep-factor node-s |"
            ),
            "|---|---|---|---|---|",
        ]
        for m, s in het.items():
            rp = s.get("replay") or {}
            lines.append(
                f"| {m} | {s['switches']} / {rp.get('switches', '–')} | {s['setup_steps']} / "
                f"{rp.get('setup_steps', '–')} | "
                f"{s['setup_s']:.1f} ({s['reload_s']:.1f}) | {s['stretch_s']:.1f} |"
            )
    lines.append("")
    return "\n".join(lines)


def plot_timeline(runs: list[dict], episodes, path: Path, episode: int = 0) -> Path:
    """Which job ran on which node at each step: one panel per method (episode ``episode``); colour = job."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    rs = [r for r in runs if r["episode"] == episode]
    tasks = episodes[episode][0]
    n_nodes = max([m for r in rs for _, m, _ in r["timeline"] + list(r.get("setup_timeline", []))], default=0) + 1
    cmap = plt.get_cmap("tab20")
    fig, axes = plt.subplots(
        len(rs), 1, figsize=(11, 0.9 + 0.55 * n_nodes * len(rs) + 0.4 * len(rs)), squeeze=False, sharex=True
    )
    for ax, r in zip(axes[:, 0], rs):
        for t, m, j in r["timeline"]:
            ax.broken_barh([(t, 1)], (m - 0.4, 0.8), facecolors=cmap(j % 20), edgecolor="none")
        for t, m, j in r.get("setup_timeline", ()):  # set-up steps after a switch: hatched, no batch
            ax.broken_barh([(t, 1)], (m - 0.4, 0.8), facecolors="white", edgecolor=cmap(j % 20), hatch="///", lw=0.5)
        last = {j: (t, m) for t, m, j in r["timeline"]}
        for j, task in enumerate(tasks):
            ax.axvline(task["arrival"], color=cmap(j % 20), lw=0.8, ls=":", alpha=0.8)
            if r["status"][j] == TaskStatus.SUCCEEDED and j in last:  # succeeded: a tick after its last batch
                ax.text(last[j][0] + 1.2, last[j][1], "✓", va="center", fontsize=9, color="k")
        ax.set_yticks(range(n_nodes), [f"node {m}" for m in range(n_nodes)])
        ax.set_ylim(-0.6, n_nodes - 0.4)
        ax.set_title(
            f"{r['method']}: {r['succeeded']}/{r['n_tasks']} jobs succeeded, utilisation "
            f"{100 * r['utilization']:.0f} %",
            fontsize=10,
        )
        ax.invert_yaxis()
    axes[-1, 0].set_xlabel(
        "step (dotted: job arrival; ✓: job reached ε"
        + ("; hatched: set-up after a switch)" if any(r.get("setup_timeline") for r in rs) else ")")
    )
    handles = [Patch(color=cmap(j % 20), label=f"job {j} {t['family']}") for j, t in enumerate(tasks)]
    fig.legend(
        handles=handles,
        loc="upper center",
        ncol=min(4, len(tasks)),
        fontsize=8,
        bbox_to_anchor=(0.5, 0.0),
        frameon=False,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def write_report(
    run: LiveSettings,
    out: Path,
    runs: list[dict],
    episodes,
    table: dict,
    data: str,
    notes: list[str],
    bank_path,
    calibration_bank: str | None = None,
) -> dict:
    """Write live_results.json / .md and the timeline figure into ``out``; print the summary; return the results."""
    for r in runs:
        if r.get("replay"):
            r["replay"]["agreement"] = compare_decisions(r["decisions"], r["replay"]["decisions"])
    summary = summarize(runs)
    lv = run.live
    res = {
        "schema": SCHEMA,
        "data": data,
        "notes": notes,
        "bank": str(bank_path) if bank_path else None,
        "config": {
            "families": list(lv.families),
            "load": float(lv.load),
            "root": int(lv.root),
            "episodes": int(lv.episodes),
            "time_scale": float(lv.time_scale),
            "workers": str(lv.workers),
            "sim": dict(run.sim),
            "methods": list(dict.fromkeys(x["method"] for x in runs)),
            "n_jobs": sum(len(t) for t, _ in episodes),
        },
        "family_params": table,
        "calibration_bank": calibration_bank,
        "episodes": [
            {"episode": e, "jobs": [dict(t, job=j) for j, t in enumerate(tasks)]}
            for e, (tasks, _) in enumerate(episodes)
        ],
        "summary": summary,
        "runs": [{k: v for k, v in r.items()} for r in runs],
    }
    (out / "live_results.json").write_text(json.dumps(res, indent=1, default=float))
    md = markdown(res)
    (out / "live_results.md").write_text(md)
    paths = {"json": str(out / "live_results.json"), "md": str(out / "live_results.md")}
    if lv.figure and runs:
        paths["timeline"] = str(plot_timeline(runs, episodes, out / "live_timeline.png"))
    res["paths"] = paths
    print(md, file=sys.stderr)
    for m, s in summary.items():
        rp = s.get("replay")
        if rp:
            past = "" if rp["beyond_record"] == 0 else f", replay ran {rp['beyond_record']} batches past the record"
            print(
                f"sim-vs-live {m}: decisions {'identical' if rp['decisions_identical'] else 'differ'} "
                f"({rp['matching_steps']}/{rp['steps']} steps), successes live {s['succeeded']} vs replayed "
                f"{rp['succeeded']}{past}",
                file=sys.stderr,
            )
    print(
        f"wrote {paths['json']}, {paths['md']}" + (f", {paths['timeline']}" if "timeline" in paths else ""),
        file=sys.stderr,
    )
    return res
