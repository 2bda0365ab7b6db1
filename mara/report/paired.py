"""Mean success per load and paired differences between the methods of evaluation runs on the same episodes
(± standard error over episodes, learned methods averaged over training seeds first): ``decomposition``'s pairing.

``paired_table``: every method's mean success (%) per load, ``METHOD − BASE`` per load, the switches paid per episode
where the rows carry them (unequal nodes / switch costs), and for a selection bound (rows with
``clairvoyant_found``: Slack-Truth-chosen) the Clairvoyant solve beside what its schedule realised.
``by_task_set``: ``METHOD − BASE`` per load for each task set, to see where a gap sits.
"""

from __future__ import annotations

import numpy as np

from mara.report.decomposition import episode_success, paired_difference


def _loads(rows: list[dict]) -> list[float]:
    return sorted({float(r["load"]) for r in rows})


def _diff_cell(a: dict, b: dict) -> str:
    d = paired_difference(a, b)
    return "–" if d is None else f"{d['diff']:+.2f} ± {d['se']:.2f}"


def _bound_solve(rows: list[dict], m: str, loads: list[float]) -> list[str]:
    """A selection bound's Clairvoyant solve (proven bound, best found, realised) per load, as table lines."""
    out = [
        f"\n| {m}: the Clairvoyant solve (mean success %) | "
        + " | ".join(f"p = {p:g}" for p in loads)
        + " |\n|---|"
        + "---:|" * len(loads)
    ]
    sel = {p: [r for r in rows if r["method"] == m and float(r["load"]) == p] for p in loads}

    def rate(rr, k):
        return 100 * np.nanmean([r[k] / r["n_tasks"] if r["n_tasks"] else np.nan for r in rr])

    for label, k in (
        ("proven upper bound", "clairvoyant_bound"),
        ("best schedule found (switch costs relaxed)", "clairvoyant_found"),
        ("realised with switch costs", "succeeded"),
    ):
        out.append(f"| {label} | " + " | ".join(f"{rate(sel[p], k):.2f}" if sel[p] else "–" for p in loads) + " |")
    out.append(
        "| episodes proven optimal | "
        + " | ".join(f"{sum(r['optimal'] for r in sel[p])} / {len(sel[p])}" for p in loads)
        + " |"
    )
    return out


def paired_table(rows: list[dict], base: str, methods: list[str]) -> str:
    """The markdown tables of ``methods`` (default: every other method of the rows) against ``base``."""
    loads = _loads(rows)
    names = [base, *methods] if methods else [base] + sorted({r["method"] for r in rows} - {base})
    per = {p: episode_success(rows, p) for p in loads}
    out = ["| method | " + " | ".join(f"p = {p:g}" for p in loads) + " | switches / episode |"]
    out.append("|---|" + "---:|" * (len(loads) + 1))
    for m in names:
        cells = [f"{np.mean(list(per[p][m].values())):.2f}" if m in per[p] else "–" for p in loads]
        sw = [
            np.mean(
                [r["switches"] for r in rows if r["method"] == m and float(r["load"]) == p and "switches" in r]
                or [np.nan]
            )
            for p in loads
        ]
        out.append(f"| {m} | " + " | ".join(cells) + " | " + " / ".join(f"{s:.1f}" for s in sw) + " |")
    out.append(
        "\n| paired difference | " + " | ".join(f"p = {p:g}" for p in loads) + " |\n|---|" + "---:|" * len(loads)
    )
    for m in names[1:]:
        cells = [_diff_cell(per[p].get(m, {}), per[p].get(base, {})) for p in loads]
        out.append(f"| {m} − {base} | " + " | ".join(cells) + " |")
    for m in sorted({r["method"] for r in rows if "clairvoyant_found" in r}):
        out += _bound_solve(rows, m, loads)
    return "\n".join(out)


def by_task_set(rows: list[dict], base: str, methods: list[str]) -> str:
    """One line per (task set, method): ``method − base`` per load."""
    loads = _loads(rows)
    out = ["| task set | paired difference | " + " | ".join(f"p = {p:g}" for p in loads) + " |"]
    out.append("|---|---|" + "---:|" * len(loads))
    for ts in sorted({r["task_set"] for r in rows}):
        per = {p: episode_success([r for r in rows if r["task_set"] == ts], p) for p in loads}
        for m in methods:
            cells = [_diff_cell(per[p].get(m, {}), per[p].get(base, {})) for p in loads]
            out.append(f"| {ts} | {m} − {base} | " + " | ".join(cells) + " |")
    return "\n".join(out)
