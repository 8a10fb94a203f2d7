"""`lakehouse project` and `lakehouse settings`: the declaration and the settings in force."""

from __future__ import annotations

import argparse
import json

from ..settings import Settings


def cmd_project(args: argparse.Namespace, settings: Settings) -> int:
    """The declared project: its sources and every table the platform derives from it."""
    from ..project import load_project

    project = load_project(settings.project)
    summary = project.summary()
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"project {project.name} ({project.file})")
    for source in project.landing_sources:
        print(f"  landing {source.landing}/ -> {', '.join(source.table_names)}")
    others = [t for t in summary["tables"] if not any(t in s.table_names for s in project.landing_sources)]
    print(f"  other tables: {', '.join(others)}")
    return 0


def cmd_settings(args: argparse.Namespace, settings: Settings) -> int:
    """The settings in force: the chosen profile under the environment, secrets shown only as set."""
    described = settings.describe()
    if args.json:
        print(json.dumps(described, indent=2))
    else:
        for key, value in described.items():
            print(f"{key:15s} {value}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("project", help="the declared sources and the tables derived from them (LAKEHOUSE_PROJECT)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_project)

    p = sub.add_parser("settings", help="the settings in force (LAKEHOUSE_PROFILE, then the environment)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_settings)
