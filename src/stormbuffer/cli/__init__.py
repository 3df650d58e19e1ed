"""The human `sbuf` command line."""
