"""``docs/plugin-api.md``: the reference of :mod:`nlptasks.plugin`, the public API for plugin
authors, generated from its ``API_GROUPS``, the signatures and the docstrings (run through
``python tools/gen_docs.py``, which writes every generated page).

Functions get their signature and docstring; classes their docstring, their fields (with the
attribute docstrings written under each field in the source) and their public methods; constants
their value and the docstring under the assignment.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from typing import Any

from gen_docs import _anchor, _cell, header, inline, rst_to_md, signature_text


def attribute_docs(obj: Any) -> dict[str, str]:
    """``name → docstring`` of the string literals written right under assignments in the source
    of a class or module (the convention Sphinx reads)."""
    try:
        source = textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return {}
    tree = ast.parse(source)
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else tree.body
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:], strict=False):
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        )
        if (
            isinstance(target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[target.id] = inspect.cleandoc(after.value.value)
    return docs


def _class_section(name: str, cls: type, links: dict[str, str]) -> list[str]:
    out = [f"### `{name}`", ""]
    if dataclasses.is_dataclass(cls):
        fields = [f for f in dataclasses.fields(cls) if f.name != "plugin"]
        out += ["```python", f"@dataclass\nclass {name}:"]
        out += [
            f"    {f.name}: {f.type}"
            + ("" if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING else " = ...")
            for f in fields
        ]
        out += ["```", ""]
    else:
        out += [
            "```python",
            f"class {name}{'(Protocol)' if getattr(cls, '_is_protocol', False) else ''}: ...",
            "```",
            "",
        ]
    out.append(rst_to_md(cls.__doc__ or "", level=4, links=links))
    docs = attribute_docs(cls)
    if dataclasses.is_dataclass(cls) and docs:
        out += ["| field | what |", "| --- | --- |"]
        out += [
            f"| `{f.name}` | {_cell(inline(docs.get(f.name, '').replace(chr(10), ' '), links))} |"
            for f in dataclasses.fields(cls)
            if f.name in docs
        ]
        out.append("")
    methods = [
        (m, fn)
        for m, fn in vars(cls).items()
        if inspect.isfunction(fn) and not m.startswith("_") and (fn.__doc__ or "").strip()
    ]
    for method, fn in methods:
        out += [
            f"#### `{name}.{method}`",
            "",
            "```python",
            signature_text(method, fn),
            "```",
            "",
            rst_to_md(fn.__doc__ or "", level=5, links=links),
            "",
        ]
    return out


def generate() -> str:
    import nlptasks.plugin as api

    names = [n for group in api.API_GROUPS.values() for n in group]
    links = {n: _anchor(f"`{n}`") for n in names}
    out = [header("nlptasks/plugin.py and the modules it re-exports"), "# Plugin API reference", ""]
    out.append(rst_to_md(api.__doc__ or "", level=2, links=links))
    out += ["Contents:", ""]
    for group, members in api.API_GROUPS.items():
        out.append(f"* **{group}**: " + ", ".join(f"[`{n}`]({links[n]})" for n in members))
    out.append("")
    for group, members in api.API_GROUPS.items():
        out += [f"## {group}", ""]
        for name in members:
            value = getattr(api, name)
            if inspect.isclass(value):
                out += _class_section(name, value, links)
            elif inspect.isfunction(value):
                out += [
                    f"### `{name}`",
                    "",
                    "```python",
                    signature_text(name, value),
                    "```",
                    "",
                    rst_to_md(value.__doc__ or "", level=4, links=links),
                    "",
                ]
            else:  # a constant or a marker: its assignment and the docstring written under it
                home = _home(name)
                shown = (
                    f'pluggy.HookimplMarker("{value.project_name}")' if hasattr(value, "project_name") else repr(value)
                )
                out += [f"### `{name}`", "", "```python", f"{name} = {shown}", "```", ""]
                doc = attribute_docs(home).get(name, "") if home is not None else ""
                if doc:
                    out.append(rst_to_md(doc, level=4, links=links))
            out.append("")
    return "\n".join(line.rstrip() for line in "\n".join(out).split("\n")).rstrip() + "\n"


def _home(name: str) -> Any:
    """The module whose source assigns the constant ``name`` (for its docstring)."""
    import importlib

    for module in ("nlptasks.engine.data.reading", "nlptasks.types", "nlptasks.hookspecs"):
        mod = importlib.import_module(module)
        if name in vars(mod):
            return mod
    return None
