"""TOML in and out: reading a recipe file, ``--set KEY=VALUE`` overrides, and writing a recipe
(``recipe.toml`` of a run, ``nlptasks validate --show``)."""

from __future__ import annotations

import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from nlptasks.errors import NlptasksError, Problem, RecipeError

__all__ = ["apply_override", "dump_toml", "override_text", "parse_override", "read_toml"]


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"train.learning_rate=3e-5"`` → ``(["train", "learning_rate"], 3e-05)``.

    The value is read as a TOML value (numbers, booleans, ``[lists]``, ``"quoted strings"``);
    anything that is not valid TOML is taken as a plain string.
    """
    if "=" not in item:
        raise RecipeError(
            "--set",
            [Problem(item, "expected KEY=VALUE, e.g. --set train.learning_rate=3e-5")],
        )
    key, text = _split_override(item)
    parts = _key_parts(key)
    if not parts or not all(parts):
        raise RecipeError("--set", [Problem(item, "empty key part; keys look like train.learning_rate")])
    try:
        value = tomllib.loads(f"v = {text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = text
    return parts, value


def _split_override(item: str) -> tuple[str, str]:
    """``KEY=VALUE`` at the first ``=`` outside a quoted key part (``tune.space."a=b"=...``)."""
    quote = None
    for i, ch in enumerate(item):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "=":
            return item[:i], item[i + 1 :]
    return item, ""


def _key_parts(key: str) -> list[str]:
    """A dotted key as TOML reads one: ``tune.space."train.learning_rate"`` is three parts, the last
    ``train.learning_rate`` (a ``[tune.space]`` entry names a recipe key); unquoted parts are split at
    every dot."""
    key = key.strip()
    if '"' in key or "'" in key:
        try:
            node: Any = tomllib.loads(f"{key} = 0")
        except tomllib.TOMLDecodeError:
            return [p.strip() for p in key.split(".")]
        parts = []
        while isinstance(node, dict) and len(node) == 1:
            name, node = next(iter(node.items()))
            parts.append(name)
        return parts
    return [p.strip() for p in key.split(".")]


def override_text(key: str, value: Any) -> str:
    """``("train.learning_rate", 3e-05)`` → ``"train.learning_rate=3e-05"``: the ``--set`` text that
    :func:`parse_override` reads back as the same key and value."""
    return f"{key}={_toml_value(value)}"


def apply_override(raw: dict[str, Any], parts: list[str], value: Any) -> None:
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            where = ".".join(parts[: i + 1])
            raise RecipeError("--set", [Problem(where, "is a value, not a table; cannot set a key inside it")])
        node = child
    node[parts[-1]] = value


def read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NlptasksError(
            f"{path}: recipe not found", hint="Shipped recipes are in recipes/, e.g. `nlptasks run recipes/cls.toml`."
        ) from None
    except IsADirectoryError:
        raise NlptasksError(f"{path}: is a folder, not a recipe file") from None
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise RecipeError(
            str(path),
            [Problem(f"line {line}", f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x}): save the recipe as UTF-8")],
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RecipeError(str(path), [Problem("", f"not valid TOML: {exc}")]) from None


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None)
        return "{ " + inner + " }" if inner else "{}"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key, ensure_ascii=False)


def dump_toml(data: dict[str, Any], header: str = "") -> str:
    """Write nested dicts as TOML (enough for recipes: scalars, lists, tables)."""
    lines: list[str] = [f"# {line}" if line else "#" for line in header.splitlines()]

    def table(node: dict[str, Any], path: list[str]) -> None:
        scalars = {k: v for k, v in node.items() if not isinstance(v, dict) and v is not None}
        tables = {k: v for k, v in node.items() if isinstance(v, dict)}
        if path and (scalars or not tables):
            lines.append("")
            lines.append("[" + ".".join(_toml_key(p) for p in path) + "]")
        for k, v in scalars.items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        for k, v in tables.items():
            table(v, [*path, k])

    table(data, [])
    return "\n".join(lines).lstrip("\n") + "\n"
