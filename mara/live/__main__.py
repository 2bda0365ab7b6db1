"""``python -m mara.live``: the allocators schedule real zoo training jobs (conf/live.yaml).

Examples::

    python -m mara.live live.data_root=/path/to/data_cache methods=[FIFO,EDF]
    python -m mara.live methods=[MARA,FIFO] '++method_overrides={MARA: {ckpt_path: RUN/policy/checkpoints/best.ckpt}}'
    python -m mara.live action=export_bank                      # the live-scaled bank, to train MARA for live mode
    python -m mara.live live.workers=ray live.ray.address=auto  # on the head of a Ray cluster
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from mara.core.cli import check_group_overrides, run_cli
from mara.live.run import _before_any_work, live_main


@hydra.main(version_base="1.3", config_path="../../conf", config_name="live")
def _hydra_main(cfg: DictConfig) -> None:

    run_cli(live_main, cfg)


def main() -> None:
    """The command line: overrides are checked first (one line, exit 2), then Hydra composes."""
    check_group_overrides(config_name="live", check=_before_any_work)  # a multirun: every job checked first
    _hydra_main()


if __name__ == "__main__":
    main()
