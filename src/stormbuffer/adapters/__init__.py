"""Ways into Stormbuffer for other programs. Adapters only move bytes to and from the protocol layer."""
