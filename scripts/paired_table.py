"""Mean success per load and paired differences between methods of one evaluation run (± standard error over
episodes, learned methods averaged over seeds first): ``mara.report.decomposition``'s pairing.

    python scripts/paired_table.py RESULTS_JSON[,RESULTS_JSON...] BASE [METHOD ...]

prints a markdown table: every method's mean success (%) per load, then ``METHOD − BASE`` per load, and the
switches paid per episode where the rows carry them (unequal nodes / switch costs), and for a selection bound
(rows with ``clairvoyant_found``: Slack-Truth-chosen) the Clairvoyant solve beside what its schedule realised. Several
runs on the same episodes (the same protocol, other methods) are read together.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from mara.report.decomposition import episode_success, paired_difference


def main(path: str, base: str, methods: list[str]) -> None:
    rows = [r for p in path.split(",") for r in json.loads(open(p).read())["rows"]]
    loads = sorted({float(r["load"]) for r in rows})
    names = [base, *methods] if methods else [base] + sorted({r["method"] for r in rows} - {base})
    per = {p: episode_success(rows, p) for p in loads}
    head = "| method | " + " | ".join(f"p = {p:g}" for p in loads) + " | switches / episode |"
    print(head + "\n|---|" + "---:|" * (len(loads) + 1))
    for m in names:
        cells = [f"{np.mean(list(per[p][m].values())):.2f}" if m in per[p] else "–" for p in loads]
        sw = [
            np.mean(
                [r["switches"] for r in rows if r["method"] == m and float(r["load"]) == p and "switches" in r]
                or [np.nan]
            )
            for p in loads
        ]
        print(f"| {m} | " + " | ".join(cells) + " | " + " / ".join(f"{s:.1f}" for s in sw) + " |")
    print("\n| paired difference | " + " | ".join(f"p = {p:g}" for p in loads) + " |\n|---|" + "---:|" * len(loads))
    for m in names[1:]:
        cells = []
        for p in loads:
            d = paired_difference(per[p].get(m, {}), per[p].get(base, {}))
            cells.append("–" if d is None else f"{d['diff']:+.2f} ± {d['se']:.2f}")
        print(f"| {m} − {base} | " + " | ".join(cells) + " |")
    for m in sorted({r["method"] for r in rows if "clairvoyant_found" in r}):
        print(
            f"\n| {m}: the Clairvoyant solve (mean success %) | "
            + " | ".join(f"p = {p:g}" for p in loads)
            + " |\n|---|"
            + "---:|" * len(loads)
        )
        sel = {p: [r for r in rows if r["method"] == m and float(r["load"]) == p] for p in loads}

        def rate(rr, k):
            return 100 * np.nanmean([r[k] / r["n_tasks"] if r["n_tasks"] else np.nan for r in rr])

        for label, k in (
            ("proven upper bound", "clairvoyant_bound"),
            ("best schedule found (switch costs relaxed)", "clairvoyant_found"),
            ("realised with switch costs", "succeeded"),
        ):
            print(f"| {label} | " + " | ".join(f"{rate(sel[p], k):.2f}" if sel[p] else "–" for p in loads) + " |")
        print(
            "| episodes proven optimal | "
            + " | ".join(f"{sum(r['optimal'] for r in sel[p])} / {len(sel[p])}" for p in loads)
            + " |"
        )


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python scripts/paired_table.py RESULTS_JSON BASE [METHOD ...]")
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
