"""Bounds, not policies: the Clairvoyant optimum (clairvoyant_k: exact under the admission limit K;
clairvoyant: K relaxed). The Oracle (independent feasibility) is ``EpisodeBatch.oracle_successes``."""
