"""``python -m mara.report run=<folder> [readme=docs/results.md]``: (re)write a paper-protocol run's report.md /
report.json and, with ``readme=``, regenerate the results section of that page between
``<!-- results:begin -->`` and ``<!-- results:end -->`` from it (figures copied to docs/figures/paper_*.png).
"""
from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from mara.core.files import write_text_atomic
from mara.report.paper import copy_figures_for_readme, readme_markdown, write_report
from mara.report.sections import figure_link, figures_dir, replace_section


def main(argv: list[str] | None = None) -> int:

    args = sys.argv[1:] if argv is None else argv
    try:
        cfg = OmegaConf.from_dotlist(args)
        unknown = set(cfg) - {"run", "readme"}
        if unknown:
            raise ValueError(f"unknown option(s) {', '.join(sorted(unknown))}; usage: python -m mara.report "
                             "run=<folder> [readme=docs/results.md]")
        if not cfg.get("run"):
            raise ValueError("usage: python -m mara.report run=<folder> [readme=docs/results.md]")
        run = Path(str(cfg.run))
        if not (run / "evaluation" / "results.json").exists():
            raise FileNotFoundError(f"{run} holds no evaluation/results.json (not a finished experiment=paper run)")
        paths = write_report(run)
        print(f"wrote {paths['md']} and {paths['json']}")
        if cfg.get("readme"):
            readme = Path(str(cfg.readme))
            import json

            rep = json.loads(Path(paths["json"]).read_text())
            copies = copy_figures_for_readme(rep, figures_dir(readme))
            section = readme_markdown(rep, str(cfg.readme)) + "".join(f"\n![{p.stem}]({figure_link(readme, p)})" for p in copies) + "\n"
            write_text_atomic(readme, replace_section(readme.read_text(), section, "results"))
            print(f"updated the results section of {readme}")
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
