"""Maintenance tools run with python -m (tools.docs: the docs' generated blocks)."""
