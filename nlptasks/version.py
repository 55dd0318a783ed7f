"""The version of nlptasks: one place, read by the package, the plugin host and ``pyproject.toml``."""

__all__ = ["__version__"]

__version__ = "0.1.0"
