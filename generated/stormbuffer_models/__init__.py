"""Pydantic models generated from schema/ (do not edit)."""
