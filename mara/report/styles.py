"""One line style per method, the same in every figure the package draws.

Each method's colour and marker are in its own YAML (``report: {colour, marker}``, mara/core/registry.py); its kind
sets the rest. Three kinds read at a glance: the bounds (``kind: bound`` and the rules fed true remaining batches,
``bound: true``: what no allocator with these estimates can beat) dashed; the rules solid and thin with small markers;
the learned policies solid, thick, with large markers and drawn on top. A name the registry does not know (a row of
an older results file) gets a deterministic style from its name (dash-dot, a colour outside the registered ones): the
same name looks the same everywhere.
"""

from __future__ import annotations

import zlib

from mara.core import registry

_FALLBACK_COLOURS = (
    "#4363d8",
    "#f58231",
    "#3cb44b",
    "#e6194b",
    "#42d4f4",
    "#fabed4",
    "#dcbeff",
    "#aaffc3",
    "#ffd8b1",
    "#5f9ea0",
    "#b8860b",
    "#2f4f4f",
)
_FALLBACK_MARKERS = ("h", "*", "p", "8", "X", "1")


def bounds() -> tuple[str, ...]:
    """The bounds: never counted as a rule by the gap decomposition (report/decomposition.py), dashed here."""
    return registry.bound_methods()


def method_style(name: str) -> dict:
    """Keyword arguments for ``Axes.plot`` (colour, line style and width, marker, marker size, z-order) of a method."""
    entry = registry.methods().get(name)
    if entry is not None and entry.colour and entry.marker:
        colour, marker = entry.colour, entry.marker
        if entry.bound:
            return {
                "color": colour,
                "linestyle": "--",
                "linewidth": 1.5,
                "marker": marker,
                "markersize": 6,
                "zorder": 2,
            }
        if entry.learned:
            return {
                "color": colour,
                "linestyle": "-",
                "linewidth": 2.6,
                "marker": marker,
                "markersize": 6.5,
                "zorder": 4,
            }
        return {"color": colour, "linestyle": "-", "linewidth": 1.3, "marker": marker, "markersize": 4, "zorder": 3}
    h = zlib.crc32(name.encode())  # stable across processes, unlike hash()
    learned = entry.learned if entry is not None else name.startswith("MARA")
    return {
        "color": _FALLBACK_COLOURS[h % len(_FALLBACK_COLOURS)],
        "linestyle": "-.",
        "linewidth": 2.6 if learned else 1.3,
        "marker": _FALLBACK_MARKERS[(h // 7) % len(_FALLBACK_MARKERS)],
        "markersize": 6.5 if learned else 4,
        "zorder": 4 if learned else 3,
    }


def known_methods() -> list[str]:
    """Every method with a style of its own (a registered ``report`` colour and marker)."""
    return [m.name for m in registry.methods().values() if m.colour and m.marker]
