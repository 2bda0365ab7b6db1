"""``python -m mara.peers <subcommand>``: the ElasticFlow authors' simulator beside ours on the same trace files.

    run        run the peer on the fidelity cases (or any trace), recorded in docs/fidelity/trace_peer.json
    fidelity   the peer and ours side by side on the fidelity cases: docs/fidelity/trace_fidelity.md / .json
    partial    ours beside a peer run cut by its time limit, on the jobs the peer decided before the cut
    bench      the peer's seconds beside our replay of the same file, and the speed-up (target >= 20x)

``python -m mara.peers <subcommand> --help`` gives each one's options.
"""

from __future__ import annotations

import sys

from mara.peers import bench, fidelity_table, partial, run_cases

SUBCOMMANDS = {"run": run_cases.main, "fidelity": fidelity_table.main, "partial": partial.main, "bench": bench.main}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return
    if args[0] not in SUBCOMMANDS:
        print(f"error: unknown subcommand {args[0]!r}; one of {', '.join(SUBCOMMANDS)}", file=sys.stderr)
        sys.exit(2)
    SUBCOMMANDS[args[0]](args[1:])


if __name__ == "__main__":
    main()
