"""Errors raised by the embedding package; each maps to one semantic fallback reason."""


class ModelUnavailable(Exception):
    """No verified model: not acquired yet, no usable source, or a download/verification failed."""


class EmbedderInitError(Exception):
    """The model cache exists but is damaged, or the inference session could not be created."""


class EmbeddingFailed(Exception):
    """The model failed while embedding valid input."""
