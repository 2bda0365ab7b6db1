"""The task zoo of the paper (Table 6): real models + real/synthetic data for the ten families.

Heavy imports (torch, torchvision, Lightning) happen on first use of ``build_run`` & co., so that
configuration errors are reported quickly.
"""

from tasks_zoo.errors import ZooError

__all__ = ["ZooError", "build_datamodule", "build_run", "build_task", "known_families", "load_zoo_config"]


def __getattr__(name):
    if name in ("build_datamodule", "build_run", "build_task", "known_families", "load_zoo_config"):
        from tasks_zoo import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'tasks_zoo' has no attribute {name!r}")
