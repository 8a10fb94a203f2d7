"""What analysts may read, for both SQL doors: `lakehouse sql` (duckdb_sql.py) applies it in Python, and
`lakehouse serve` (endpoint.py) hands it to its Java check (ReadOnlySql.java) in the server's Spark settings.

Raw tables hold what was landed as it came (payloads, personal data in clear): the bronze tables, their
quarantines and the ingest log. A table is raw when its name starts with one of RAW_PREFIXES or ends with one of
RAW_SUFFIXES (the names the declaration gives those tables: project/model.py), unless the declaration gives it
another layer (a gold `bronze_medals`). Raw tables are hidden unless an engineer asks (`lakehouse sql --raw`,
LAKEHOUSE_SQL_RAW=1). Both doors read the analysts' S3 credential (read_only_settings).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..settings import Settings

RAW_PREFIXES: tuple[str, ...] = ("bronze_",)  # bronze_<source>, bronze_<source>_quarantine, bronze_ingest_log
RAW_SUFFIXES: tuple[str, ...] = ("_quarantine",)

# The endpoint's Spark settings that carry the rule to ReadOnlySql.java (the server's own: no session may set them).
RAW_VISIBLE_KEY = "spark.lakehouse.serve.raw"  # "true": raw tables are exposed (LAKEHOUSE_SQL_RAW=1)
RAW_PREFIXES_KEY = "spark.lakehouse.serve.rawPrefixes"  # RAW_PREFIXES, comma-separated
RAW_SUFFIXES_KEY = "spark.lakehouse.serve.rawSuffixes"  # RAW_SUFFIXES, comma-separated
EXPOSED_KEY = "spark.lakehouse.serve.exposed"  # declared tables of other layers whose names look raw


def looks_raw(name: str) -> bool:
    """Whether a table's name is a raw table's (case does not count)."""
    lower = name.lower()
    return (lower.startswith(tuple(p.lower() for p in RAW_PREFIXES))
            or lower.endswith(tuple(s.lower() for s in RAW_SUFFIXES)))


def declared_raw(settings: Settings) -> dict[str, bool]:
    """Each declared table: whether the build gives it the bronze layer (build.table_specs: every landing
    source's bronze and quarantine tables and the ingest log). Empty when no declaration loads."""
    from ..errors import DeclarationError
    from ..project import load_project
    from ..project.model import INGEST_LOG

    try:
        project = load_project(settings.project, settings.project_origin)
    except (DeclarationError, OSError):
        return {}
    raw = {INGEST_LOG, *(s.bronze for s in project.landing_sources), *(s.quarantine for s in project.landing_sources)}
    return {name: name in raw for name in project.table_names}


def raw_tables(settings: Settings, names: Iterable[str]) -> set[str]:
    """Those of `names` that hold raw data. The declaration's layer decides for the tables it declares; a table
    it does not declare (another project's, a source since removed) is raw when its name looks raw."""
    suspects = {name for name in names if looks_raw(name)}
    if not suspects:
        return set()  # the declaration is read only when it may decide something
    declared = declared_raw(settings)
    return {name for name in suspects if declared.get(name, True)}


def exposed_raw_looking(settings: Settings) -> list[str]:
    """Declared tables of other layers whose names look raw (a gold `bronze_medals`): they are not raw."""
    return sorted(name for name, raw in declared_raw(settings).items() if not raw and looks_raw(name))


def endpoint_rule(settings: Settings) -> dict[str, str]:
    """The rule as the endpoint's Spark settings, which its Java check reads (ReadOnlySql.rawName)."""
    for affix in (*RAW_PREFIXES, *RAW_SUFFIXES):
        if not affix or "," in affix:
            raise ValueError(f"a raw table's prefix or suffix is a non-empty name without commas, not {affix!r}")
    return {
        RAW_VISIBLE_KEY: str(settings.sql_raw).lower(),
        RAW_PREFIXES_KEY: ",".join(RAW_PREFIXES),
        RAW_SUFFIXES_KEY: ",".join(RAW_SUFFIXES),
        EXPOSED_KEY: ",".join(exposed_raw_looking(settings)),
    }


def declared_ml_tables(settings: Settings) -> list[str]:
    """The declaration's ML tables (features, training sets); none when no declaration loads."""
    from ..errors import DeclarationError
    from ..project import load_project

    try:
        return sorted(load_project(settings.project, settings.project_origin).gold.ml_tables)
    except (DeclarationError, OSError):
        return []


def catalog_rules(ml_tables: Iterable[str] = (), readers_io: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The REST catalog server's rules per principal (lakehouse_services.rest_catalog.CatalogRule, Java regular
    expressions over a table's `namespace.name`): the pipeline does everything; analysts and dashboards read every
    table but the raw ones; ML users read the ML tables alone (`ml_tables`, else every table named `ml_...`). The
    server does not know the declaration, so a declared table of another layer whose name looks raw (a gold
    `bronze_medals`) is refused to analysts too. `readers_io`: the storage settings handed to the readers with each
    table (the read-only S3 identity: reader_io)."""
    from lakehouse_services.rest_catalog import CatalogRule

    affixes = "|".join([*(f"{re.escape(p)}[^.]*" for p in RAW_PREFIXES), *(f"[^.]*{re.escape(s)}" for s in RAW_SUFFIXES)])
    names = sorted(ml_tables)
    ml = "|".join(re.escape(name) for name in names) if names else "ml_[^.]*"
    vend = dict(readers_io or {})
    return {"pipeline": CatalogRule(write=True), "analyst": CatalogRule(hidden=f"(?i)(^|[.])({affixes})$", vend=vend),
            "ml": CatalogRule(visible=f"(?i)(^|[.])({ml})$", vend=vend)}


def reader_io(settings: Settings) -> dict[str, str]:
    """The FileIO settings of the read-only S3 identity (LAKEHOUSE_SQL_S3_*), for a REST catalog to hand its
    readers; none when no such identity is set or the lake is not on S3."""
    if not settings.sql_s3_access_key or not settings.uses_s3:
        return {}
    io = {"s3.access-key-id": settings.sql_s3_access_key, "s3.secret-access-key": settings.sql_s3_secret_key,
          "client.region": settings.s3_region, "s3.region": settings.s3_region}
    if settings.s3_endpoint:
        io.update({"s3.endpoint": settings.s3_endpoint, "s3.path-style-access": "true"})
    return io


def read_only_settings(settings: Settings) -> Settings:
    """The settings with the read-only S3 credential for analysts' SQL in place of the lake's, when one is set:
    the catalog's metadata and the tables' files are then read with it alone."""
    if not settings.sql_s3_access_key:
        return settings
    return settings.with_(s3_access_key=settings.sql_s3_access_key, s3_secret_key=settings.sql_s3_secret_key)
