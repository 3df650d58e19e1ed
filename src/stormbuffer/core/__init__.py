"""The core: canonical records, stores, the repository and its policies."""
