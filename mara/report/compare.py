"""Row-by-row comparison of two runs of the same protocol: per method, how many rows (method, task set, load, root,
training seed, episode) differ in any recorded outcome (a bound's solve seconds, a wall clock, aside). Shows that a
change leaves every number of a method unchanged, e.g. against a checkout of an earlier commit.
"""

from __future__ import annotations

KEY = ("method", "task_set", "load", "root", "train_seed", "episode")
CLOCK = ("solve_time_s",)  # wall-clock seconds of a bound's solve: they differ between any two runs, not an outcome


def keyed(rows: list[dict]) -> dict[tuple, dict]:
    """Each row by its key, without its wall-clock fields."""
    return {tuple(r.get(k) for k in KEY): {k: v for k, v in r.items() if k not in CLOCK} for r in rows}


def compare_rows(before: list[dict], after: list[dict]) -> tuple[str, int]:
    """(one line per method: rows before / after and how many differ, the number of differing rows in all)."""
    a, b = keyed(before), keyed(after)
    lines, total = [], 0
    for m in sorted({k[0] for k in a} | {k[0] for k in b}):
        ka, kb = {k for k in a if k[0] == m}, {k for k in b if k[0] == m}
        differing = sum(a[k] != b[k] for k in ka & kb) + len(ka ^ kb)
        total += differing
        lines.append(f"{m:22s} rows {len(ka):5d} / {len(kb):5d}  differing {differing}")
    return "\n".join(lines), total
