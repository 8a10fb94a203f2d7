"""`lakehouse project` and `lakehouse settings`: the declaration and the settings in force."""

from __future__ import annotations

import argparse
import json

from ..settings import Settings


def cmd_project(args: argparse.Namespace, settings: Settings) -> int:
    """The declared project: its sources and every table the platform derives from it."""
    from ..project import load_project

    project = load_project(settings.project, settings.project_origin)
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


def _declared_plan(settings: Settings):
    """The catalog, and the plan of what differs between the declaration and its tables."""
    from ..build import table_specs, tables_taking_data_columns
    from ..project import load_project
    from ..runtime.catalog import catalog_for
    from ..tables.evolution import plan

    project = load_project(settings.project, settings.project_origin)
    catalog = catalog_for(settings)
    return catalog, plan(table_specs(project), catalog, settings.namespace, tables_taking_data_columns(project))


def cmd_plan(args: argparse.Namespace, settings: Settings) -> int:
    """What differs between the declaration and the tables in the catalog; exit 1 when anything does."""
    _, result = _declared_plan(settings)
    if args.json:
        print(json.dumps({"changes": [c.as_dict() for c in result.changes], "not_created": result.not_created,
                          "kept": [c.as_dict() for c in result.kept]}, indent=2))
    else:
        for change in result.changes:
            print(change.text())
        for column in result.kept:
            print(f"{column.table}: keeps column {column.subject} ({column.before}), {column.operation}")
        if result.not_created:
            print(f"not created yet (their first run creates them as declared): {', '.join(result.not_created)}")
        if not result.changes:
            print(f"the tables of {settings.catalog_name}.{settings.namespace} match the declaration")
        elif result.destructive:
            print(f"{len(result.changes)} differences, {len(result.destructive)} destructive")
        else:
            print(f"{len(result.changes)} differences, all safe (metadata only)")
    return 1 if result.changes else 0


def cmd_apply(args: argparse.Namespace, settings: Settings) -> int:
    """Make the plan's differences (dropped columns only with --allow-drop), one metadata commit per table; all
    or nothing: while any difference is held, none is made and the exit code is 1."""
    from ..tables.evolution import DROPPING, apply

    catalog, planned = _declared_plan(settings)
    done = apply(catalog, settings.namespace, planned, allow_drop=args.allow_drop)
    if args.json:
        print(json.dumps({key: [c.as_dict() for c in getattr(done, key)] for key in ("applied", "left", "held")},
                         indent=2))
    elif done.held:
        print(f"nothing applied: {len(done.held)} of the {len(done.left)} differences cannot be made as asked")
        for change in done.held:
            why = "needs --allow-drop" if change.kind in DROPPING else "not possible in place"
            print(f"  held ({why}): {change.text()}")
        print("the plan:")
        for change in done.left:
            print(f"  {change.text()}")
    else:
        for change in done.applied:
            print(f"applied: {change.text()}")
        print(f"{len(done.applied)} applied")
    return 1 if done.left else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("project", help="the declared sources and the tables derived from them (LAKEHOUSE_PROJECT)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_project)

    p = sub.add_parser("plan", help="what differs between the declaration and the tables (exit 1 when anything does)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("apply", help="make the plan's differences in the tables (metadata only), all or none: "
                                     "exit 1 when any is held")
    p.add_argument("--allow-drop", action="store_true", help="also drop the columns the declaration dropped")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_apply)

    p = sub.add_parser("settings", help="the settings in force (LAKEHOUSE_PROFILE, then the environment)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_settings)
