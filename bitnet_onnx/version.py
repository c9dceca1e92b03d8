"""The package version: its one home (pyproject.toml reads it at build time)."""

__version__ = "0.1.0"
