"""Where the gap to the optimum comes from (allocation vs prediction): pure functions over per-episode result rows.

With the exact optimum (``Clairvoyant``) and the least-slack rule fed the true remaining batches (``Slack-Truth``,
the perfect-prediction bound) in the same run, every method's gap to the optimum splits into

* the **allocation gap** ``Clairvoyant − Slack-Truth`` (what better ordering could still win with perfect
  estimates; the same for every method), and
* the method's **prediction gap** ``Slack-Truth − method`` (what perfect estimates would add to it).

All differences are paired over identical episodes (task set, root, episode): a learned method is first averaged
over its training seeds, then the per-episode difference gives a mean and its standard error. The share of the
``Slack-WLS → Slack-Truth`` gap a method closes is ``(method − Slack-WLS) / (Slack-Truth − Slack-WLS)`` with a
delta-method standard error.
"""

from __future__ import annotations

import numpy as np

from mara.core.registry import bound_methods

OPTIMUM, PERFECT, BASE_RULE = "Clairvoyant", "Slack-Truth", "Slack-WLS"


def episode_success(rows: list[dict], load: float) -> dict[str, dict[tuple, float]]:
    """{method: {(task_set, root, episode): success % (mean over training seeds)}} at ``load``."""
    acc: dict = {}
    for r in rows:
        if (
            abs(float(r["load"]) - float(load)) > 1e-9
            or r.get("success_rate") is None
            or not np.isfinite(r["success_rate"])
        ):
            continue
        acc.setdefault(r["method"], {}).setdefault((r.get("task_set"), r.get("root"), r.get("episode")), []).append(
            100.0 * r["success_rate"]
        )
    return {m: {k: float(np.mean(v)) for k, v in per.items()} for m, per in acc.items()}


def _common(*series: dict) -> list:
    keys = set(series[0])
    for s in series[1:]:
        keys &= set(s)
    return sorted(keys)


def paired_difference(a: dict, b: dict) -> dict | None:
    """Mean and standard error of ``a − b`` over the episodes both have ({key: value} each); None if none shared."""
    keys = _common(a, b)
    if not keys:
        return None
    d = np.array([a[k] - b[k] for k in keys])
    se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else None
    return {"diff": float(d.mean()), "se": se, "n": int(len(d))}


def share_closed(method: dict, low: dict, high: dict) -> dict | None:
    """Share of the ``low → high`` gap that ``method`` closes: mean(method − low) / mean(high − low), paired over the
    episodes all three have, with a delta-method standard error; None without episodes or with no gap."""
    keys = _common(method, low, high)
    if len(keys) < 2:
        return None
    d1 = np.array([method[k] - low[k] for k in keys])
    d2 = np.array([high[k] - low[k] for k in keys])
    m1, m2 = d1.mean(), d2.mean()
    if abs(m2) < 1e-12:
        return None
    r = m1 / m2
    c = np.cov(d1, d2, ddof=1)
    var = (c[0, 0] - 2 * r * c[0, 1] + r * r * c[1, 1]) / (m2 * m2 * len(keys))
    return {"share": float(r), "se": float(np.sqrt(max(var, 0.0))), "n": int(len(keys))}


def gap_decomposition(rows: list[dict], learned: set | None = None, not_rules=None) -> dict:
    """Per load (str): ``allocation_gap`` (Clairvoyant − Slack-Truth), per method ``prediction_gap``
    (Slack-Truth − method), ``share_closed`` of the Slack-WLS → Slack-Truth gap per method, and for each learned
    method ``minus_best_rule`` (paired difference to the non-learned, non-bound method with the highest mean at that
    load). Parts whose methods are missing are left out; {} when neither Clairvoyant nor Slack-Truth is there.
    ``not_rules``: never "the best rule" (default: the registry's bounds, privileged rules included)."""
    bounds = set(bound_methods())
    not_rules = bounds if not_rules is None else not_rules
    learned = set(learned if learned is not None else {r["method"] for r in rows if r.get("train_seed") is not None})
    loads = sorted({float(r["load"]) for r in rows})
    out: dict = {}
    for load in loads:
        s = episode_success(rows, load)
        cell: dict = {}
        if PERFECT in s and OPTIMUM in s:
            cell["allocation_gap"] = paired_difference(s[OPTIMUM], s[PERFECT])
        if PERFECT in s:
            cell["prediction_gap"] = {
                m: paired_difference(s[PERFECT], v) for m, v in s.items() if m not in bounds and m != PERFECT
            }
            if BASE_RULE in s:
                cell["share_closed"] = {
                    m: share_closed(v, s[BASE_RULE], s[PERFECT])
                    for m, v in s.items()
                    if m not in bounds and m != BASE_RULE
                }
        rules = {m: float(np.mean(list(v.values()))) for m, v in s.items() if m not in not_rules and m not in learned}
        if rules and learned & set(s):
            best = max(rules, key=rules.get)
            cell["best_rule"] = best
            cell["minus_best_rule"] = {m: paired_difference(s[m], s[best]) for m in sorted(learned & set(s))}
        if cell:
            out[f"{load:g}"] = cell
    return out


def _pm(c: dict | None, key: str = "diff", pct: bool = False) -> str:
    if not c or c.get(key) is None:
        return "–"
    scale, unit = (100.0, " %") if pct else (1.0, "")
    se = "" if c.get("se") is None else (f" ± {scale * c['se']:.1f}" if pct else f" ± {c['se']:.2f}")
    return f"{scale * c[key]:+.2f}{se}{unit}" if not pct else f"{scale * c[key]:.1f}{se}{unit}"


def _methods_of(dec: dict, part: str, order: list[str] | None) -> list[str]:
    """The methods a part of the decomposition names at any load, in the report's order (the rest by name)."""
    return sorted(
        {m for cell in dec.values() for m in (cell.get(part) or {})},
        key=lambda m: (order.index(m) if order and m in order else 999, m),
    )


def _per_load_row(label: str, dec: dict, part: str, method: str, key: str = "diff", pct: bool = False) -> str:
    """One markdown row: a method's entry of one part of the decomposition at every load."""
    return (
        f"| {label} | " + " | ".join(_pm((cell.get(part) or {}).get(method), key, pct) for cell in dec.values()) + " |"
    )


def _per_load_table(intro: list[str], first: str, loads: list[str], rows: list[str]) -> list[str]:
    """A markdown table with one column per load: its intro lines, header (first cell ``first``), rows, a blank."""
    header = (f"| {first} | " if first else "| | ") + " | ".join(f"p = {ld}" for ld in loads) + " |"
    return [*intro, header, "|---|" + "---:|" * len(loads), *rows, ""]


def decomposition_markdown(dec: dict, order: list[str] | None = None) -> list[str]:
    """Markdown lines of ``gap_decomposition`` (empty when there is nothing to show)."""
    if not dec:
        return []
    loads = list(dec)
    L = [
        "## Gap decomposition (paired over identical episodes, ± standard error)",
        "",
        "Allocation gap = Clairvoyant − Slack-Truth (perfect estimates, same timing: from the 4th observation); "
        "prediction gap = Slack-Truth − method. Points of success rate (%).",
        "",
    ]
    if any("allocation_gap" in dec[ld] for ld in loads):
        gaps = " | ".join(_pm(dec[ld].get("allocation_gap")) for ld in loads)
        rows = [f"| allocation gap (Clairvoyant − Slack-Truth) | {gaps} |"]
        rows += [
            _per_load_row(f"prediction gap of {m} (Slack-Truth − {m})", dec, "prediction_gap", m)
            for m in _methods_of(dec, "prediction_gap", order)
        ]
        L += _per_load_table([], "", loads, rows)
    shares = _methods_of(dec, "share_closed", order)
    if shares:
        intro = "Share of the Slack-WLS → Slack-Truth gap closed (method − Slack-WLS) / (Slack-Truth − Slack-WLS):"
        L += _per_load_table(
            [intro, ""], "Method", loads, [_per_load_row(m, dec, "share_closed", m, "share", pct=True) for m in shares]
        )
    learned = sorted({m for ld in loads for m in (dec[ld].get("minus_best_rule") or {})})
    if learned:
        intro = "Learned method minus the best non-learned method at each load (bounds and Slack-Truth excluded):"
        rows = ["| best rule | " + " | ".join(dec[ld].get("best_rule", "–") for ld in loads) + " |"]
        rows += [_per_load_row(f"{m} − best rule", dec, "minus_best_rule", m) for m in learned]
        L += _per_load_table([intro, ""], "", loads, rows)
    return L
