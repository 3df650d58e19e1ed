"""The bounds of one `sbuf invoke` call, importable without the rest of the protocol."""

MAX_INPUT_BYTES = 262144
MAX_OUTPUT_BYTES = 262144
