"""One line style per method, the same in every figure the package draws.

Three kinds read at a glance: the bounds (Clairvoyant, Oracle, and the rules fed true remaining batches —
Slack-Truth, Slack-Truth-displace, Slack-Truth-cold, Plan-Truth(-arrivals), Slack-Truth-chosen: what no allocator with these estimates can beat) dashed; the rules
solid and thin with small markers; the learned policies (MARA*) solid, thick, with large markers and drawn on top. Within a kind every method has its own colour and marker, so no two methods
share a colour (matplotlib's 10-colour cycle repeats after ten lines). A method not listed here gets a
deterministic style from its name (dash-dot, a colour outside the table): the same name looks the same everywhere.
"""
from __future__ import annotations

import zlib

BOUNDS = ("Clairvoyant", "Oracle", "Slack-Truth", "Slack-Truth-displace", "Slack-Truth-cold", "Plan-Truth",
          "Plan-Truth-arrivals", "Slack-Truth-chosen")  # also the methods the gap decomposition never counts as a rule (report/decomposition.py)

# method -> (colour, marker); the kind (bound / rule / learned) sets the line style, width and marker size
_LEARNED = {
    "MARA-QR": ("#d62728", "D"),      # red
    "MARA-QR-cal": ("#ff6f61", "d"),  # coral
    "MARA-suite": ("#ff4500", "*"),   # orange red
    "MARA-nodes": ("#daa520", "X"),   # goldenrod
    "MARA-suite-ppo": ("#8b008b", "h"),  # dark magenta
    "MARA": ("#800000", "o"),         # maroon
    "MARA-WLS": ("#f032e6", "^"),     # magenta
    "MARA-sparse": ("#9a6324", "v"),  # brown
    "MARA-paper": ("#808000", "P"),   # olive
}
_RULES = {
    "Slack-QR-q": ("#2ca02c", "s"),    # green
    "Slack-QR": ("#469990", "s"),      # teal
    "Slack-FM-q": ("#1f77b4", "^"),    # blue
    "Slack-FM": ("#17becf", "^"),      # cyan
    "Slack-WLS": ("#ff7f0e", "x"),     # orange
    "LARA": ("#9467bd", "<"),          # purple
    "LARA-FM": ("#000075", ">"),       # navy
    "LARA-best": ("#e377c2", "<"),     # pink
    "LARA-FM-best": ("#bcbd22", ">"),  # yellow-green
    "EDF": ("#8c564b", "d"),           # tan brown
    "FIFO": ("#a9a9a9", "o"),          # light grey
    "Slack-QR-displace": ("#556b2f", "s"),  # dark olive
    "Plan-QR": ("#c71585", "*"),       # violet red
    "Plan-QR-arrivals": ("#db7093", "*"),  # pale violet red
    "Slack-QR-q-cold": ("#00a86b", "p"),  # jade
    "Slack-QR-q-cal": ("#7cfc00", "h"),   # lawn green
    "Slack-LCPFN": ("#ff1493", "D"),      # deep pink
    "ElasticFlow": ("#2e8b57", "v"),      # sea green (job traces)
    "ElasticFlow-true": ("#191970", "v"),  # midnight blue (target-loss jobs, told the true count)
    "ElasticFlow-predicted": ("#ff8c00", "v"),  # dark orange (target-loss jobs, planned on the estimate)
}
_BOUNDS = {
    "Clairvoyant": ("#000000", "."),   # black
    "Oracle": ("#606060", "."),        # dark grey
    "Slack-Truth": ("#911eb4", "."),   # violet
    "Slack-Truth-displace": ("#6a5acd", "."),  # slate blue
    "Plan-Truth": ("#8b4513", "."),    # saddle brown
    "Plan-Truth-arrivals": ("#a0522d", "."),  # sienna
    "Slack-Truth-cold": ("#da70d6", "."),  # orchid
    "Slack-Truth-chosen": ("#4b0082", "."),  # indigo
}
_FALLBACK_COLOURS = ("#4363d8", "#f58231", "#3cb44b", "#e6194b", "#42d4f4", "#fabed4", "#dcbeff", "#aaffc3",
                     "#ffd8b1", "#5f9ea0", "#b8860b", "#2f4f4f")
_FALLBACK_MARKERS = ("h", "*", "p", "8", "X", "1")


def method_style(name: str) -> dict:
    """Keyword arguments for ``Axes.plot`` (colour, line style and width, marker, marker size, z-order) of a method."""
    if name in _BOUNDS:
        colour, marker = _BOUNDS[name]
        return {"color": colour, "linestyle": "--", "linewidth": 1.5, "marker": marker, "markersize": 6, "zorder": 2}
    if name in _LEARNED:
        colour, marker = _LEARNED[name]
        return {"color": colour, "linestyle": "-", "linewidth": 2.6, "marker": marker, "markersize": 6.5, "zorder": 4}
    if name in _RULES:
        colour, marker = _RULES[name]
        return {"color": colour, "linestyle": "-", "linewidth": 1.3, "marker": marker, "markersize": 4, "zorder": 3}
    h = zlib.crc32(name.encode())  # stable across processes, unlike hash()
    learned = name.startswith("MARA")
    return {"color": _FALLBACK_COLOURS[h % len(_FALLBACK_COLOURS)], "linestyle": "-.",
            "linewidth": 2.6 if learned else 1.3, "marker": _FALLBACK_MARKERS[(h // 7) % len(_FALLBACK_MARKERS)],
            "markersize": 6.5 if learned else 4, "zorder": 4 if learned else 3}


def known_methods() -> list[str]:
    """Every method with a fixed style."""
    return [*_LEARNED, *_RULES, *_BOUNDS]
