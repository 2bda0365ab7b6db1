"""MARA: flow-matching-guided multi-agent resource allocation for compute-aware learning."""

__version__ = "0.1.0"
