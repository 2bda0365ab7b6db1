"""Job traces (ITP schemas) replayed on a GPU cluster: loading, the event-driven simulator, the deadline schedulers."""
