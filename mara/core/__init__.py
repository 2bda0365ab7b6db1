"""Shared infrastructure: configuration and errors (config), entry-point helpers (cli), logging and
progress (runlog), atomic file writes (files), the resumable job graph (jobs)."""

from mara.core.registry import register_resolvers as _register_resolvers

_register_resolvers()  # ${mara.methods:train} in conf/: the default method lists read the registry
