"""Shared infrastructure: configuration and errors (config), entry-point helpers (cli), logging and
progress (runlog), the resumable job graph (jobs)."""
