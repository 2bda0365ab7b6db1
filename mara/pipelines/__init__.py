"""Pipelines that run whole stages of the project one after another: the paper's protocol (``paper``)."""
