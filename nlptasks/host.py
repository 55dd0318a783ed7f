"""The plugin host: finds plugins, validates their hooks, records the tasks they provide.

Plugins are what ``nlptasks.plugin`` documents; the host is what loads them (tests build their own
with ``Host(load_entrypoints=False)``, or :func:`nlptasks.testing.plugin_host`).

Built-in and third-party plugins are found the same way: through the ``nlptasks`` entry-point
group.  Environment variables:

``NLPTASKS_PLUGINS``
    comma-separated entry-point names: load only these (``NLPTASKS_PLUGINS=cls``); an empty value
    loads none.
``NLPTASKS_BLOCK_PLUGINS``
    comma-separated entry-point names never to load.
``NLPTASKS_TRACE``
    set to ``1`` to log every hook call with its arguments and result.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any

import pluggy

from nlptasks import hookspecs
from nlptasks.deprecations import deprecated
from nlptasks.engine import defaults
from nlptasks.errors import PluginError, did_you_mean
from nlptasks.types import Backend, TaskSpec
from nlptasks.version import __version__

__all__ = ["ENTRY_POINT_GROUP", "Host", "PluginFailure", "current_host", "get_host", "reset_host"]

ENTRY_POINT_GROUP = "nlptasks"
ENGINE_PLUGIN = "nlptasks.engine"

log = logging.getLogger("nlptasks.plugins")


@dataclass(frozen=True)
class PluginFailure:
    """An entry point that could not be imported or registered."""

    name: str
    value: str
    dist: str
    error: str

    def __str__(self) -> str:
        return f"plugin {self.name!r} ({self.value}, from {self.dist}) failed to load: {self.error}"


@dataclass
class PluginInfo:
    name: str
    dist: str
    version: str
    hooks: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    old_forms: list[str] = field(default_factory=list)
    """Hooks it implements in an older, deprecated form (:data:`nlptasks.hookspecs.NEWER_ARGUMENTS`)."""


def _env_names(var: str) -> set[str] | None:
    raw = os.environ.get(var)
    if raw is None:
        return None
    return {part.strip() for part in raw.split(",") if part.strip()}


def _dist_of(ep: EntryPoint) -> tuple[str, str]:
    dist = getattr(ep, "dist", None)
    if dist is None:
        return "unknown", ""
    return dist.metadata["Name"], dist.version


class _TwoPlugins(PluginError):
    """Two plugins register the same task or backend name: the user must choose (not a plugin's own failure)."""


class Host:
    """A ``pluggy.PluginManager`` plus the registries of tasks and inference backends.

    :param load_entrypoints: find plugins in the ``nlptasks`` entry-point group (tests turn this
        off and register plugins by hand).
    """

    def __init__(self, load_entrypoints: bool = True) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.tasks: dict[str, TaskSpec] = {}
        self.backends: dict[str, Backend] = {}
        """The backends plugins registered (``register_backends``); the built-in ``torch`` and
        ``onnx`` are the inference floor's own (:mod:`nlptasks.inference.backends`)."""
        self.failures: list[PluginFailure] = []
        self._dists: dict[str, tuple[str, str]] = {}
        self._built = False
        self.pm.register(defaults, name=ENGINE_PLUGIN)
        self._dists[ENGINE_PLUGIN] = ("nlptasks", __version__)
        if load_entrypoints:
            self._load_entrypoints()
        if os.environ.get("NLPTASKS_TRACE") == "1":
            self.pm.trace.root.setwriter(lambda msg: sys.stderr.write(f"[trace] {msg}"))
            self.pm.enable_tracing()
        self._collect_tasks()
        self._built = True

    # -- loading -------------------------------------------------------------------------------

    def _load_entrypoints(self) -> None:
        allow = _env_names("NLPTASKS_PLUGINS")
        block = _env_names("NLPTASKS_BLOCK_PLUGINS") or set()
        seen: set[str] = set()
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in seen or (allow is not None and ep.name not in allow) or ep.name in block:
                continue
            seen.add(ep.name)
            dist, version = _dist_of(ep)
            try:
                plugin = ep.load()
                self.register(plugin, name=ep.name, dist=(dist, version))
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken plugin must not break the CLI
                failure = PluginFailure(ep.name, ep.value, f"{dist} {version}".strip(), _one_line(exc))
                self.failures.append(failure)
                log.warning("%s", failure)

    def register(
        self, plugin: ModuleType | object, name: str | None = None, dist: tuple[str, str] | None = None
    ) -> str:
        """Register a plugin object or module, validate its hooks, and record its tasks.

        A hook implementation whose name is not a hook (a typo) is an error naming the plugin.
        """
        plugin_name = self.pm.register(plugin, name=name)
        assert plugin_name is not None
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            self.pm.unregister(plugin)
            raise PluginError(
                f"plugin {plugin_name!r}: {exc}",
                hint="Hook names are listed in docs/hooks.md (and nlptasks/hookspecs.py).",
            ) from None
        self._dists[plugin_name] = dist or _module_dist(plugin)
        for hook in self.old_forms(plugin):
            new = ", ".join(hookspecs.NEWER_ARGUMENTS[hook])
            deprecated(
                f"hook:{hook}:{plugin_name}",
                f"plugin {plugin_name!r} implements {hook} without its argument(s) {new}",
                f"add {new} to its signature (docs/hooks.md#{hook.replace('_', '-')})",
            )
        if self._built:  # host already built: collect this plugin's tasks now
            self._collect_tasks(only=plugin)
        return plugin_name

    def old_forms(self, plugin: ModuleType | object) -> list[str]:
        """The hooks ``plugin`` implements in an older form: without any of the arguments the hook
        gained since (:data:`nlptasks.hookspecs.NEWER_ARGUMENTS`; wrappers see what they ask for)."""
        old = []
        for caller in self.pm.get_hookcallers(plugin) or []:
            newer = hookspecs.NEWER_ARGUMENTS.get(caller.name)
            if not newer:
                continue
            for impl in caller.get_hookimpls():
                wrapper = impl.hookwrapper or getattr(impl, "wrapper", False)
                if impl.plugin is plugin and not wrapper and not set(newer) & set(impl.argnames):
                    old.append(caller.name)
        return sorted(set(old))

    def unregister(self, plugin: ModuleType | object) -> None:
        name = self.pm.get_name(plugin)
        self.pm.unregister(plugin)
        self.tasks = {k: v for k, v in self.tasks.items() if v.plugin != name}
        self.backends = {k: v for k, v in self.backends.items() if v.plugin != name}

    def _collect_tasks(self, only: object | None = None) -> None:
        """Call each plugin's ``register_tasks`` and ``register_backends`` and record what it declares."""
        plugins = [only] if only is not None else self.pm.get_plugins()
        tables: list[tuple[str, type, dict[str, Any], str]] = [
            ("register_tasks", TaskSpec, self.tasks, "task"),
            ("register_backends", Backend, self.backends, "backend"),
        ]
        for plugin in plugins:
            name = self.pm.get_name(plugin)
            if name is None:
                continue
            for hook, kind, table, what in tables:
                impl = getattr(plugin, hook, None)
                if impl is None:
                    continue

                def register(
                    spec: Any, _name: str = name, _kind: type = kind, _table: dict[str, Any] = table, _what: str = what
                ) -> None:
                    if not isinstance(spec, _kind):
                        raise PluginError(
                            f"plugin {_name!r} registered {spec!r}, not a nlptasks.plugin.{_kind.__name__}"
                        )
                    if spec.name in _table and _table[spec.name].plugin != _name:
                        other = _table[spec.name].plugin
                        raise _TwoPlugins(
                            f"{_what} {spec.name!r} is provided by two plugins: {other!r} and {_name!r}",
                            hint=f"Block one of them: NLPTASKS_BLOCK_PLUGINS={_name}",
                        )
                    _table[spec.name] = dataclasses.replace(spec, plugin=_name)

                try:
                    impl(register=register)
                except _TwoPlugins:
                    raise
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken plugin must not break the CLI
                    failure = PluginFailure(name, name, " ".join(self.dist_of(name)).strip(), _one_line(exc))
                    self.failures.append(failure)
                    log.warning("%s", failure)

    # -- queries -------------------------------------------------------------------------------

    def task(self, name: str) -> TaskSpec:
        """The task called ``name``, or an error listing the available tasks."""
        if name in self.tasks:
            return self.tasks[name]
        raise PluginError(self.unknown_task_message(name), hint=self.failures_hint())

    def unknown_task_message(self, name: str) -> str:
        available = ", ".join(sorted(self.tasks)) or "none"
        return f"no plugin provides task {name!r}{did_you_mean(name, self.tasks)}; available: {available}"

    def failures_hint(self) -> str:
        lines = [str(f) for f in self.failures]
        lines.append("See what is installed with `nlptasks plugins`; install a plugin with `pip install PACKAGE`.")
        return "\n".join(lines)

    def dist_of(self, plugin_name: str) -> tuple[str, str]:
        return self._dists.get(plugin_name, ("unknown", ""))

    def hooks_for(self, task: TaskSpec) -> TaskHooks:
        """Hook callers for a run of ``task``: the other task plugins are left out."""
        other_task_plugins = {t.plugin for t in self.tasks.values()} - {task.plugin}
        others = [p for p in self.pm.get_plugins() if self.pm.get_name(p) in other_task_plugins]
        return TaskHooks(self.pm, others)

    def infos(self) -> list[PluginInfo]:
        """One entry per registered plugin: distribution, version, hooks and tasks."""
        infos = []
        for plugin in self.pm.get_plugins():
            name = self.pm.get_name(plugin)
            assert name is not None
            dist, version = self.dist_of(name)
            hooks = sorted(
                h.name
                for h in (self.pm.get_hookcallers(plugin) or [])
                if h.name not in ("register_tasks", "register_backends")
            )
            tasks = sorted(t.name for t in self.tasks.values() if t.plugin == name)
            backends = sorted(b.name for b in self.backends.values() if b.plugin == name)
            infos.append(PluginInfo(name, dist, version, hooks, tasks, backends, self.old_forms(plugin)))
        return sorted(infos, key=lambda i: (i.name != ENGINE_PLUGIN, i.name))


class TaskHooks:
    """``hooks.nlptasks_setup(ctx=...)`` etc., with some plugins left out."""

    def __init__(self, pm: pluggy.PluginManager, remove: list[object]) -> None:
        self._pm = pm
        self._remove = remove

    def __getattr__(self, name: str) -> Any:
        if not self._remove:
            return getattr(self._pm.hook, name)
        return self._pm.subset_hook_caller(name, remove_plugins=self._remove)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _module_dist(plugin: object) -> tuple[str, str]:
    module = plugin if isinstance(plugin, ModuleType) else sys.modules.get(type(plugin).__module__)
    top = (getattr(module, "__name__", "") or "").split(".")[0]
    try:
        from importlib.metadata import packages_distributions, version

        dists = packages_distributions().get(top) or []
        if dists:
            return dists[0], version(dists[0])
    except Exception:  # noqa: BLE001
        pass
    return (top or "unknown"), ""


_HOST: Host | None = None


def get_host() -> Host:
    """The process-wide host, built on first use."""
    global _HOST
    if _HOST is None:
        _HOST = Host()
    return _HOST


def current_host() -> Host | None:
    """The process-wide host if one was built (or set), without building one."""
    return _HOST


def reset_host(host: Host | None = None) -> None:
    """Replace (or forget) the process-wide host; for tests."""
    global _HOST
    _HOST = host
