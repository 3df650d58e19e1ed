"""Stormbuffer: a local-first memory store for coding agents."""

__version__ = "0.1.0"
