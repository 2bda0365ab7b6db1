"""Shared infrastructure: configuration and errors (config), entry-point helpers (cli), logging and
progress (runlog), atomic file writes (files), the resumable job graph (jobs)."""
