"""Deprecations: how a public name, hook signature or recipe key changes without breaking anyone.

The policy (docs/plugin-guide.md#deprecations): an old form keeps working, with this warning, for at
least one minor release after the one that deprecates it, and the warning names the release that
removes it.  :func:`deprecated` raises a ``DeprecationWarning`` for Python code that filters them (and
for ``-W error``), and prints one ``nlptasks: deprecated: ...`` line on stderr the first time each
deprecation is met in a process: Python's default filters hide a ``DeprecationWarning`` raised
outside ``__main__``, so without that line a plugin or recipe would look current from the command
line until the old form was removed.  ``NLPTASKS_DEPRECATIONS=quiet`` keeps the line off stderr
(the warning is still raised).
"""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["REMOVED_IN", "deprecated"]

REMOVED_IN = "0.3.0"
"""The release that removes what this one (0.1.x) deprecates: one minor release (0.2) keeps it with
the warning."""

_said: set[str] = set()


def deprecated(key: str, what: str, change: str, removed_in: str = REMOVED_IN, stacklevel: int = 2) -> str:
    """Warn that ``what`` (the plugin and hook, or the recipe key, and where) is deprecated: ``change``
    says what to write instead.  ``key`` identifies the deprecation (one stderr line per key and
    process).  Returns the line."""
    line = f"nlptasks: deprecated: {what}: {change}; the old form stops working in nlptasks {removed_in}"
    warnings.warn(line, DeprecationWarning, stacklevel=stacklevel + 1)
    if key not in _said:
        _said.add(key)
        if os.environ.get("NLPTASKS_DEPRECATIONS", "").lower() != "quiet":
            print(line, file=sys.stderr, flush=True)
    return line
