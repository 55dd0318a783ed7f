"""nlptasks' built-in task plugins.

Each sub-package is one plugin, registered through the ``nlptasks`` entry-point group in our
``pyproject.toml`` exactly as a third-party plugin registers (``cls = "nlptasks_plugins.cls"``).
"""
