"""The package version (pyproject.toml says the same), importable from every layer."""

__version__ = "0.1.0"
