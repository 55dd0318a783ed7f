"""``nlptasks plugins``: installed plugins, their tasks and hooks, and plugins that failed to load."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["cmd", "register"]


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "plugins",
        help="list installed plugins, their tasks and hooks",
        description="List installed plugins, the tasks they provide and the hooks they implement.",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.deprecations import REMOVED_IN
    from nlptasks.pipeline import get_host

    host = get_host()
    infos = host.infos()
    if args.json:
        payload = {
            "plugins": [info.__dict__ for info in infos],
            "tasks": {
                name: {
                    "plugin": spec.plugin,
                    "description": spec.description,
                    "best_metric": spec.best_metric_text(),
                    "metrics": spec.metrics_text(),
                    "label_fields": spec.label_fields_text(),
                    "peft_task_type": spec.peft_task_type_text(),
                }
                for name, spec in sorted(host.tasks.items())
            },
            "failures": [f.__dict__ for f in host.failures],
        }
        print(json.dumps(payload, ensure_ascii=False, indent=2))
        return 0
    for info in infos:
        version = f" {info.version}" if info.version else ""
        print(f"{info.name}  ({info.dist}{version})")
        for task in info.tasks:
            spec = host.tasks[task]
            print(f"  task {task}: {spec.description}")
            print(f"    best metric: {spec.best_metric_text()}; peft: {spec.peft_task_type_text()}")
            print(f"    metrics: {spec.metrics_text()}; labels: {spec.label_fields_text()}")
        print(f"  hooks: {', '.join(info.hooks) or '-'}")
        for hook in info.old_forms:
            print(
                f"  OLD FORM {hook}: deprecated, stops working in nlptasks {REMOVED_IN} (docs/plugin-guide.md#deprecations)"
            )
    for failure in host.failures:
        print(f"FAILED {failure}")
    return 0
