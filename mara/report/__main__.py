"""``python -m mara.report run=<folder> [readme=docs/results.md]``: (re)write a paper-protocol run's report.md /
report.json and, with ``readme=``, regenerate the results section of that page between
``<!-- results:begin -->`` and ``<!-- results:end -->`` from it (figures copied to docs/figures/paper_*.png).

``python -m mara.report <section> ...``: one table from run folders (paired differences, ratio to a bound, a
row-by-row comparison, the trace tables); ``python -m mara.report --help`` lists the sections (mara/report/commands.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import OmegaConf

from mara.core.files import write_text_atomic
from mara.report.commands import SECTIONS, UsageError, help_text, run_section, usage
from mara.report.paper import copy_figures_for_readme, readme_markdown, write_report
from mara.report.sections import figure_link, figures_dir, replace_section

#: the JSON files a report reads (those present), each a JSON object; the results files hold rows of method results
REPORT_INPUTS = ("evaluation/results.json", "stress/results.json", "prediction/prediction.json", "stage_timings.json")


def check_inputs(run: Path) -> None:
    """Every JSON file the report reads parses and has the shape it reads: one ValueError line naming the file."""
    import json

    files = [run / f for f in REPORT_INPUTS] + sorted((run / "policy").glob("*/seed*/DONE.json"))
    for path in files:
        if not path.exists():
            continue
        try:
            data = json.loads(path.read_text())
        except (ValueError, OSError) as exc:  # truncated, not UTF-8, unreadable
            raise ValueError(f"{path} is not a readable JSON file ({exc}): rerun the stage that writes it") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path} holds a JSON {type(data).__name__}, not the object the run wrote")
        if path.name == "results.json":
            rows, summary = data.get("rows", []), data.get("summary", {})
            if not isinstance(rows, list) or not all(isinstance(r, dict) and "method" in r for r in rows):
                raise ValueError(f"{path}: rows must be a list of result rows, each naming its method")
            if not isinstance(summary, dict):
                raise ValueError(f"{path}: summary must be a mapping of methods to results")


def main(argv: list[str] | None = None) -> int:

    args = sys.argv[1:] if argv is None else argv
    if args[:1] in (["-h"], ["--help"]):
        print(
            "usage: python -m mara.report run=<folder> [readme=docs/results.md]\n    a paper run's report\n"
            + help_text()
        )
        return 0
    if args and args[0] in SECTIONS:
        try:
            return run_section(args[0], args[1:])
        except UsageError:
            print(usage(args[0]), file=sys.stderr)
            return 2
        except (ValueError, FileNotFoundError) as exc:
            print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
            return 2
    try:
        cfg = OmegaConf.from_dotlist(args)
        unknown = set(cfg) - {"run", "readme"}
        if unknown:
            raise ValueError(
                f"unknown option(s) {', '.join(sorted(unknown))}; usage: python -m mara.report "
                "run=<folder> [readme=docs/results.md]"
            )
        if not cfg.get("run"):
            raise ValueError("usage: python -m mara.report run=<folder> [readme=docs/results.md]")
        run = Path(str(cfg.run))
        if not (run / "evaluation" / "results.json").exists():
            raise FileNotFoundError(f"{run} holds no evaluation/results.json (not a finished experiment=paper run)")
        check_inputs(run)
        try:
            paths = write_report(run)
        except (KeyError, TypeError, AttributeError, IndexError) as exc:  # valid JSON of another shape, deeper down
            raise ValueError(
                f"{run}: its results do not have the shape of a finished experiment=paper run's "
                f"({type(exc).__name__}: {exc})"
            ) from None
        print(f"wrote {paths['md']} and {paths['json']}")
        if cfg.get("readme"):
            readme = Path(str(cfg.readme))
            import json

            rep = json.loads(Path(paths["json"]).read_text())
            copies = copy_figures_for_readme(rep, figures_dir(readme))
            section = (
                readme_markdown(rep, str(cfg.readme))
                + "".join(f"\n![{p.stem}]({figure_link(readme, p)})" for p in copies)
                + "\n"
            )
            write_text_atomic(readme, replace_section(readme.read_text(), section, "results"))
            print(f"updated the results section of {readme}")
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
