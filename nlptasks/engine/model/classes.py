"""Which Python class a run's model is, recorded when it trains and found again in a fresh process.

Step 5 may return a transformers class (``BertForSequenceClassification``) or a plugin's own
``PreTrainedModel`` subclass (a span head around an encoder).  :func:`record` writes what step 5
returned into the manifest: ``model_class`` (the class name) and, for a class transformers does not
export, ``model_module`` (the module that defines it).  :func:`resolve` gives the class back to
whatever rebuilds the model later (``nlptasks eval``, ``export --onnx``, ``export --merge``,
:func:`nlptasks.load`) in a process that may not have imported the plugin yet.

A manifest is a file in a run folder, so :func:`resolve` imports no module it names unless its
package is that of an installed nlptasks plugin (an entry point of the ``nlptasks`` group) or
already imported (a plugin registered in the process); anything else is an error naming the module.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

from nlptasks.errors import NlptasksError

__all__ = ["config_class", "import_line", "is_transformers_class", "record", "resolve"]

ENTRY_POINT_GROUP = "nlptasks"  # the host's group (nlptasks.host.ENTRY_POINT_GROUP, a floor above)


def is_transformers_class(cls: type) -> bool:
    """Whether ``cls`` is what ``transformers.<its name>`` is (a class any process can find by name)."""
    import transformers

    return getattr(transformers, cls.__name__, None) is cls


def record(manifest: MutableMapping[str, Any], model: Any) -> None:
    """Write the class of ``model`` (step 5's return) into ``manifest``: ``model_class``, and
    ``model_module`` when transformers does not export the class."""
    cls = type(model)
    manifest["model_class"] = cls.__name__
    if is_transformers_class(cls):
        manifest.pop("model_module", None)
    else:
        manifest["model_module"] = cls.__module__


def _plugin_packages() -> set[str]:
    """The top-level packages of the installed plugins' entry points."""
    from importlib.metadata import entry_points

    return {ep.value.split(":")[0].split(".")[0] for ep in entry_points(group=ENTRY_POINT_GROUP)}


def resolve(manifest: Mapping[str, Any], wanted: str | type | None = None) -> Any:
    """The class to rebuild a run's model as: ``wanted`` when it is a class; a transformers class
    when ``wanted`` names one other than the run's; else the run's own, ``manifest["model_class"]``
    (from ``manifest["model_module"]`` when the run recorded a plugin's class)."""
    import transformers

    if isinstance(wanted, type):
        return wanted
    name, module = manifest.get("model_class"), manifest.get("model_module")
    if wanted and wanted != name:
        name, module = wanted, None
    if not module or not name:
        cls = getattr(transformers, str(name), None) if name else None
        if not isinstance(cls, type):
            raise NlptasksError(
                f"the run's model class {name!r} is not a class of transformers {transformers.__version__}",
                hint="A run made by a plugin's own model class records its module (model_module): train it again "
                "with this version of nlptasks.",
            )
        return cls
    package = str(module).split(".")[0]
    if package not in sys.modules and package not in _plugin_packages():
        raise NlptasksError(
            f"the run's model is {name} from the module {module!r}, which is not part of an installed nlptasks plugin",
            hint=f"Install the plugin that trained it (its package {package!r}), then check with: nlptasks plugins",
        )
    try:
        loaded = importlib.import_module(str(module))
    except ImportError as exc:
        raise NlptasksError(
            f"the run's model is {name} from {module}, which cannot be imported: {exc}",
            hint=f"Install the plugin that trained it (its package {package!r}).",
        ) from None
    cls = getattr(loaded, str(name), None)
    if not isinstance(cls, type):
        raise NlptasksError(
            f"the run's model class {name} is not in {module} any more (the plugin changed since the run trained)",
            hint="Install the plugin version that trained the run (nlptasks.json records it under 'plugins').",
        )
    return cls


def config_class(cls: type) -> Any:
    """The config class that loads ``cls``'s ``config.json``: its own ``config_class`` (a plugin's
    head may have its own model type, which ``AutoConfig`` does not know), else ``AutoConfig``."""
    own = getattr(cls, "config_class", None)
    if isinstance(own, type) and hasattr(own, "from_pretrained"):
        return own
    from transformers import AutoConfig

    return AutoConfig


def import_line(manifest: Mapping[str, Any], *also: str) -> str:
    """The Python import that makes the run's model class available, for a model card: ``from
    transformers import X`` (with ``also``), or the plugin's module for a plugin's class."""
    name = manifest.get("model_class", "AutoModel")
    module = manifest.get("model_module")
    if not module:
        return f"from transformers import {', '.join([*also, name])}"
    lines = [f"from {module} import {name}  # the plugin's own model class"]
    if also:
        lines.insert(0, f"from transformers import {', '.join(also)}")
    return "\n".join(lines)
