"""The README and docs/ against the code: declarations load, profiles resolve, `lakehouse` commands parse, Dagster
selections select, Python examples name what exists, links lead somewhere; the README's newcomer path (declare a
source, land a file, materialise gold, read it) runs as written, and so does each of its `lakehouse` commands after
the demo; the pages name every variable, command, flag, declaration key and type the code reads. Output shown in
the pages (messages, diagrams) is not checked here."""

from __future__ import annotations

import inspect
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHOP = ROOT / "examples" / "shop" / "lakehouse.yaml"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
# The virtual environment's folder as the Makefile names it (`make setup` makes it; the pages run its programs),
# and the one this test run's interpreter is in, wherever that is.
VENV = re.search(r"^VENV \?= *(\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)
BIN = Path(sys.executable).parent


def _blocks(language: str) -> list[tuple[str, str]]:
    return [(f"{page.relative_to(ROOT)}#{n}", body) for page in PAGES
            for n, (lang, body) in enumerate(FENCE.findall(page.read_text())) if lang == language]


def _commands(program: str) -> list[tuple[str, str]]:
    """Each shell command line of the pages' bash blocks that runs `program` (continuations joined)."""
    found = []
    for where, body in _blocks("bash"):
        for line in body.replace("\\\n", " ").splitlines():
            words = line.split()
            if words and words[0] in (program, f"{VENV}/bin/{program}"):
                found.append((where, line))
    return found


def test_the_readme_stays_short_and_every_page_is_linked_from_it():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in readme, f"{page.name} is not linked from the README"


def test_every_link_between_pages_leads_to_a_page_and_a_heading():
    def anchors(page: Path) -> set[str]:
        text = FENCE.sub("", page.read_text())
        return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.*)$", text, re.M)}

    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", page.read_text())):
            if re.match(r"[a-z]+://", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.name}: {target} leads nowhere"
            if anchor:
                assert anchor in anchors(linked), f"{page.name}: {target}: no such heading"


def test_every_declaration_in_the_pages_loads():
    from lakehouse_assets.project import parse_project

    declarations = [(w, b) for w, b in _blocks("yaml") if re.search(r"^name:", b, re.M)]
    assert len(declarations) >= 2  # the README's first source, the reference in declaring-sources.md
    for where, body in declarations:
        project = parse_project(body, str(SHOP.with_name(f"{where.replace('/', '-')}.yaml")))  # beside the shop
        assert project.table_names, where
    reference = next(b for w, b in declarations if w.startswith("docs/declaring-sources.md"))
    project = parse_project(reference, str(SHOP.with_name("reference.yaml")))
    assert project.events["plays"].paths["country"] == "geo.country"
    assert project.cdc["subscriptions"].pii == ("account",)
    assert project.cdc["subscriptions"].topic == "billing_pg.public.subscriptions"  # `server`, as the page says
    assert project.events["plays"].description == "One row per track played in the app."
    assert project.gold.sql_tables["gold_plan_revenue"].partitioned_by == ("plan",)


def test_every_profile_in_the_pages_sets_known_settings(tmp_path, monkeypatch):
    from lakehouse_assets.settings import load_profile

    profiles = [(w, b) for w, b in _blocks("yaml") if b.startswith("profiles:")]
    assert profiles
    for where, body in profiles:
        for variable in re.findall(r"\$\{(\w+)\}", body):  # what the deployment's environment would give
            monkeypatch.setenv(variable, "set-by-the-deployment")
        path = tmp_path / "profiles.yaml"
        path.write_text(body)
        for name in yaml.safe_load(body)["profiles"]:
            assert load_profile(name, path) is not None, f"{where}: {name}"  # unknown keys raise
    documented = next(b for w, b in profiles if w.startswith("docs/cluster.md"))
    assert yaml.safe_load(documented) == yaml.safe_load((ROOT / "examples/cluster/profiles.yaml").read_text())


def test_every_other_yaml_and_json_example_parses_and_every_python_example_names_what_exists():
    for where, body in _blocks("yaml"):
        assert yaml.safe_load(body), where
    for where, body in _blocks("json"):
        assert json.loads(body), where
    for where, body in _blocks("python"):
        code = compile(body, where, "exec")  # syntax
        imports = [line for line in body.splitlines() if line.startswith(("from ", "import "))]
        namespace: dict = {}
        exec("\n".join(imports), namespace)  # noqa: S102 - the page's own import lines
        for call in re.finditer(r"(\w+)\(([^()]*)\)", body):
            function = namespace.get(call.group(1))
            if callable(function):
                keywords = dict.fromkeys(re.findall(r"(\w+)=", call.group(2)))
                positional = [a for a in call.group(2).split(",") if a.strip() and "=" not in a]
                inspect.signature(function).bind(*positional, **keywords)  # raises on a wrong argument
        assert code


_PLACEHOLDERS = {"TABLE": "silver_events", "TABLE...": "silver_events", "NAME": "keep", "ID": "123",
                 "TIME": "2025-01-02", "N": "5", "S": "10", "PATH": "/tmp/catalog-copy.db"}


def _variants(line: str) -> list[list[str]]:
    """A synopsis line as commands: optional groups left out and all in, each `a|b` alternative taken once."""
    line = re.sub(r"\$\([^)]*\)", "X", line)
    words = shlex.split(line, comments=True)
    for n, word in enumerate(words):
        if word in (">", "|", "&&", ";"):
            words = words[:n]
            break
    words = words[1:]  # the program
    groups: list[tuple[bool, list[str]]] = []
    optional: list[str] | None = None
    for word in words:
        if word.startswith("[") and optional is None:
            optional, word = [], word[1:]
        if optional is not None:
            closing = word.endswith("]")
            optional.append(word.rstrip("]"))
            if closing:
                groups.append((True, optional))
                optional = None
        else:
            groups.append((False, [word]))
    alternatives = max([len(w.split("|")) for _, ws in groups for w in ws if "|" in w and " " not in w] or [1])
    variants = []
    for take_optional in (False, True):
        for choice in range(alternatives):
            command = []
            for is_optional, ws in groups:
                if is_optional and not take_optional:
                    continue
                for w in ws:
                    if "|" in w and " " not in w:
                        options = w.split("|")
                        w = options[choice % len(options)]
                    command.append(_PLACEHOLDERS.get(w, w))
            variants.append(command)
    return variants


def test_every_lakehouse_command_in_the_pages_is_a_command_the_cli_takes():
    from lakehouse_assets.cli import build_parser

    commands = _commands("lakehouse")
    assert len(commands) >= 20
    for where, line in commands:
        for command in _variants(line):
            try:
                build_parser().parse_args(command)
            except SystemExit:
                pytest.fail(f"{where}: `lakehouse {' '.join(command)}` (from `{line.strip()}`) is not a command")


def test_every_make_target_and_dagster_selection_in_the_pages_exists(monkeypatch):
    from dagster import AssetSelection

    from lakehouse_assets.build import build_definitions
    from lakehouse_assets.project import load_project
    from lakehouse_assets.settings import Settings

    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    for where, line in _commands("make"):
        assert line.split()[1] in targets, f"{where}: {line}"
    graph = build_definitions(load_project(SHOP), Settings.from_env()).resolve_asset_graph()
    for program, option in (("dagster", "--select"), ("dg", "--assets")):
        for where, line in _commands(program):
            words = shlex.split(line, comments=True)
            selection = words[words.index(option) + 1]
            selected = AssetSelection.from_string(selection).resolve(graph)
            assert selected, f"{where}: {selection} selects nothing of the shop"


def _checkout(root: Path) -> dict[str, str]:
    """The project's root as a checkout has it after `make setup`, at `root` (its environment where the Makefile puts
    it, the files the commands read), and the environment of a fresh shell: nothing of this test run's LAKEHOUSE_*
    and DAGSTER_* variables."""
    root.mkdir(parents=True, exist_ok=True)
    (root / VENV).symlink_to(BIN.parent, target_is_directory=True)
    for name in ("pyproject.toml", "Makefile", "dagster.yaml", "examples"):
        (root / name).symlink_to(ROOT / name)
    return {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_"))}


@pytest.mark.slow
def test_the_readme_newcomer_path_runs_as_written(tmp_path):
    """The README's first source, as a newcomer runs it from the project's root: the declaration saved where the
    README says, its shell blocks run in order, in a shell with nothing of this test run's environment."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Your first source", 1)[1].split("\n## ", 1)[0]
    blocks = FENCE.findall(section)
    assert [lang for lang, _ in blocks] == ["yaml", "bash", "bash"]
    declared_at = re.search(r"\(`([\w/]+\.yaml)`\)", section).group(1)
    env = _checkout(tmp_path)
    (tmp_path / declared_at).parent.mkdir(parents=True)
    (tmp_path / declared_at).write_text(blocks[0][1])
    script = "set -e\n" + blocks[1][1] + blocks[2][1]
    run = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]

    gold_header = run.stdout.splitlines().index("activity_date  active_users  sessions  events")
    assert run.stdout.splitlines()[gold_header + 1].split() == ["2025-06-01", "2", "2", "3"]
    reconciled = [line.split() for line in run.stdout.splitlines() if line.startswith("clicks ")]
    assert reconciled == [["clicks", "2025-06-01", "5", "3", "2", "0", "True"]]

    def sql(query: str, *flags: str) -> list[dict]:
        out = subprocess.run([str(BIN / "lakehouse"), "sql", query, "--format", "json", *flags], cwd=tmp_path,
                             env={**env, "LAKEHOUSE_PROJECT": str(tmp_path / declared_at),
                                  "LAKEHOUSE_HOME": str(tmp_path / ".mine")},
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)

    reasons = sorted(r["reason"] for r in sql("SELECT reason FROM bronze_clicks_quarantine", "--raw"))
    assert len(reasons) == 2 and all(reasons), reasons
    silver = sql("SELECT id, email_hash FROM silver_clicks ORDER BY id")
    assert [r["id"] for r in silver] == ["c1", "c2", "c3"]
    assert re.fullmatch(r"[0-9a-f]{64}", silver[0]["email_hash"]) and silver[2]["email_hash"] is None


# What the code reads, and where the pages name it. Each list comes from the code itself, so a new variable, flag,
# key or type fails here until a page names it.

def _passages() -> list[str]:
    """The pages cut where a reader looks for one thing: a line of a code block (continuations joined), a paragraph
    or table row of prose."""
    passages = []
    for page in PAGES:
        text = page.read_text()
        for _, body in FENCE.findall(text):
            passages += body.replace("\\\n", " ").splitlines()
        prose = FENCE.sub("", text)
        passages += re.split(r"\n\s*\n", prose) + [line for line in prose.splitlines() if line.startswith("|")]
    return passages


def _variables_the_code_reads() -> tuple[set[str], set[str]]:
    """The LAKEHOUSE_* variables of the platform's code (the package, the local services the `lakehouse` command
    starts) and of the Dagster instances' dagster.yaml files: every string that is a variable's whole name (what os.environ and
    the settings' table are asked for, a module's constant), and each name an f-string makes, as a pattern
    (`LAKEHOUSE_CDC_{source}_DSN` is named `LAKEHOUSE_CDC_<SOURCE>_DSN`)."""
    import ast

    names, patterns = set(), set()
    for source in [*(ROOT / "lakehouse_assets").rglob("*.py"), *(ROOT / "services").rglob("*.py")]:
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"LAKEHOUSE_[A-Z0-9_]*[A-Z0-9]", node.value):
                names.add(node.value)
            elif isinstance(node, ast.JoinedStr):
                parts = [p.value if isinstance(p, ast.Constant) else None for p in node.values]
                if isinstance(parts[0], str) and re.fullmatch(r"LAKEHOUSE_[A-Z0-9_]*", parts[0]) \
                        and all(p is None or re.fullmatch(r"[A-Z0-9_]*", p) for p in parts):
                    patterns.add("".join(re.escape(p) if p is not None else "<[A-Za-z_]+>" for p in parts))

    def env_refs(node) -> set[str]:
        if isinstance(node, dict):
            return {node["env"]} if set(node) == {"env"} else {v for n in node.values() for v in env_refs(n)}
        return set()

    for instance in [ROOT / "dagster.yaml", *(ROOT / "examples").rglob("dagster.yaml")]:
        names |= {n for n in env_refs(yaml.safe_load(instance.read_text())) if n.startswith("LAKEHOUSE_")}
    return names, patterns


def test_every_environment_variable_the_code_reads_is_named_in_the_pages():
    names, patterns = _variables_the_code_reads()
    # The scan finds what it must: settings, variables read where they are used, the Dagster instance's, an f-string's.
    assert {"LAKEHOUSE_HOME", "LAKEHOUSE_PROJECT", "LAKEHOUSE_SERVE_USER", "LAKEHOUSE_DAGSTER_STORAGE",
            "LAKEHOUSE_DAGSTER_LOGS", "LAKEHOUSE_WEED_BINARY", "LAKEHOUSE_DAGSTER_PG_URL"} <= names
    assert r"LAKEHOUSE_CDC_<[A-Za-z_]+>_DSN" in patterns
    text = "\n".join(page.read_text() for page in PAGES)
    missing = sorted(n for n in names if not re.search(rf"\b{n}\b", text))
    missing += sorted(p for p in patterns if not re.search(p, text))
    assert not missing, f"read by the code, named in no page: {', '.join(missing)}"


def _cli_words() -> list[tuple[str, str]]:
    """(command, word) for every command of `lakehouse`, every option of each, and every value an argument takes
    from a fixed list (`s3 start|stop|status`, `--format table|csv|json`), from the parser itself."""
    import argparse

    from lakehouse_assets.cli import build_parser

    words = []
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, parser in commands.choices.items():
        words.append((command, command))
        for action in parser._actions:
            words += [(command, option) for option in action.option_strings if option not in ("-h", "--help")]
            words += [(command, str(choice)) for choice in action.choices or ()]
    return words


def test_every_command_flag_and_choice_of_lakehouse_is_named_in_the_pages():
    """Each in a passage (a code line, a paragraph) that names its command."""
    words = _cli_words()
    assert ("serve", "--host") in words and ("catalog", "rebuild") in words and ("sql", "csv") in words
    passages = _passages()
    missing = []
    for command, word in words:
        about = [p for p in passages if re.search(rf"\blakehouse {re.escape(command)}\b", p)]
        if not any(re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", p) for p in about):
            missing.append(f"lakehouse {command}: {word}" if word != command else f"lakehouse {command}")
    assert not missing, "not in any page's passage about the command:\n" + "\n".join(missing)


def _declaration_keys() -> set[str]:
    """Every key a `lakehouse.yaml` may hold, at any depth, from the models the loader validates it with."""
    import typing

    from pydantic import BaseModel

    from lakehouse_assets.project.declaration import ProjectDecl

    def models(annotation) -> list[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for arg in typing.get_args(annotation) for m in models(arg)]

    keys: set[str] = set()
    todo, seen = [ProjectDecl], set()
    while todo:
        model = todo.pop()
        seen.add(model)
        for name, info in model.model_fields.items():
            keys.add(info.alias or name)
            todo += [m for m in models(info.annotation) if m not in seen]
    return keys


def test_every_declaration_key_and_type_is_named_in_the_pages():
    """A key as a key (`key:` in a YAML example, or `key` in code), a type as `type`, in the pages; every type
    the loader takes is on the list of types in declaring-sources.md."""
    from lakehouse_assets.tables.types import _TYPES, spark_type

    keys = _declaration_keys()
    assert {"partitioned_by", "server", "ready_marker", "in", "schema", "renamed_from"} <= keys
    text = "\n".join(page.read_text() for page in PAGES)
    missing = sorted(k for k in keys
                     if not re.search(rf"(`{k}`|`{k}:|^[ \t-]*{k}:|[{{,] *{k}:)", text, re.M))
    assert not missing, f"keys of lakehouse.yaml named in no page: {', '.join(missing)}"

    types = [*_TYPES, "decimal(p,s)"]
    assert spark_type("bigint") and spark_type("uuid") and spark_type("decimal(12,2)")  # the table is the loader's
    listed = re.search(r"^Types: (.*?)\.$", (ROOT / "docs" / "declaring-sources.md").read_text(), re.S | re.M)
    assert listed, "declaring-sources.md has no list of types (a paragraph starting `Types: `)"
    named = set(re.findall(r"`([^`]+)`", listed.group(1)))
    assert not [t for t in types if t not in named], f"types not listed: {[t for t in types if t not in named]}"


def _readme_lakehouse_commands() -> list[str]:
    """Each `lakehouse` command the README prints, in its order: a line of a shell block, or a code span of its prose
    (where a command is also named `lakehouse ...`: typed, it is `.venv/bin/lakehouse ...`). Not the table of pages:
    a row names the command its page is about, without the arguments it needs."""
    readme = (ROOT / "README.md").read_text()
    program = f"{VENV}/bin/lakehouse"
    lines = [line.strip() for lang, body in FENCE.findall(readme) if lang == "bash"
             for line in body.replace("\\\n", " ").splitlines() if line.split()[:1] in (["lakehouse"], [program])]
    prose = "\n".join(line for line in FENCE.sub("", readme).splitlines() if not line.startswith("|"))
    spans = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    commands = lines + [span for span in spans if span.split()[0] in ("lakehouse", program) and len(span.split()) > 1]
    typed = [re.sub(r"^lakehouse ", f"{program} ", command) for command in commands]
    return list(dict.fromkeys(typed))


@pytest.mark.slow
def test_after_the_demo_each_lakehouse_command_of_the_readme_runs_as_printed(tmp_path):
    """`make demo`, then each `lakehouse` command the README prints, typed as printed in a fresh shell (no LAKEHOUSE_*
    or DAGSTER_* variable) in the repository's root: each exits 0, on the demo's lake.

    The demo here is `make demo` made smaller: its `make home` step as it is (the home's folders, the declaration
    recorded in the home), one day (today) of the shop's events from its generator, and gold_daily_activity with what
    it reads materialised by `dagster` on the instance of the repository's dagster.yaml (`make demo` materialises
    every asset of 3 days). Each command runs on the lake as the demo left it: the files of the home are put back
    before each. Then `drop` and `reconcile` one after the other, as the README says they go without `make dev`;
    then the lake moved to a REST catalog and back (`lakehouse catalog migrate`), every table at its metadata file."""
    import datetime as dt
    import shutil

    commands = _readme_lakehouse_commands()
    assert any(" drop " in c for c in commands) and any(c.endswith(" reconcile") for c in commands), commands
    root = tmp_path / "checkout"
    env = _checkout(root)
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()

    def run(command: list[str] | str, **extra: str) -> subprocess.CompletedProcess:
        argv = ["bash", "-c", command] if isinstance(command, str) else command
        return subprocess.run(argv, cwd=root, env={**env, **extra}, capture_output=True, text=True, timeout=900)

    for step, extra in (
        (["make", "-s", "home"], {}),
        ([f"{VENV}/bin/lakehouse", "generate", "--start", today, "--days", "1", "--events-per-day", "300", "--no-cdc"],
         {}),
        ([f"{VENV}/bin/dagster", "asset", "materialize", "-m", "lakehouse_assets.definitions",
          "--select", "*gold_daily_activity", "--partition", today],
         {"DAGSTER_HOME": str(root), "LAKEHOUSE_SPARK_MASTER": "local[2]", "LAKEHOUSE_DRIVER_MEMORY": "1g"}),
    ):
        made = run(step, **extra)
        assert made.returncode == 0, f"{step}\n{made.stdout[-3000:]}{made.stderr[-5000:]}"
    home = root / ".lakehouse"
    assert (home / "project").read_text().strip() == str(root / "examples" / "shop" / "lakehouse.yaml")
    assert (home / "dagster" / "history" / "runs.db").is_file()  # the instance's records, in the home by default
    shutil.copytree(home, tmp_path / "as-the-demo-left-it", symlinks=True)

    def as_the_demo_left_it() -> None:
        shutil.rmtree(home)
        shutil.copytree(tmp_path / "as-the-demo-left-it", home, symlinks=True)

    for command in commands:
        as_the_demo_left_it()
        typed = run(command)
        assert typed.returncode == 0, f"`{command}` exited {typed.returncode}\n{typed.stdout[-2000:]}{typed.stderr[-3000:]}"
        assert today in typed.stdout, f"`{command}` did not work on the demo's day:\n{typed.stdout[-2000:]}"

    as_the_demo_left_it()
    drop = next(c for c in commands if " drop " in c)
    assert run(drop).returncode == 0
    reconciled = run(f"{VENV}/bin/lakehouse reconcile")
    assert reconciled.returncode == 1 and f"events {today}" in reconciled.stderr, reconciled.stdout + reconciled.stderr

    # The demo's lake moved to a REST catalog (a server over a catalog database of its own) and back to a SQL
    # catalog (`lakehouse catalog migrate`): every table, at the metadata file it has in the lake's catalog.
    from pyiceberg.catalog.sql import SqlCatalog

    from lakehouse_assets.serving.read_rule import catalog_rules
    from lakehouse_services.rest_catalog import RestCatalogServer

    def pointers(catalog) -> dict:
        return {t: catalog.load_table(t).metadata_location for ns in catalog.list_namespaces()
                for t in catalog.list_tables(ns)}

    as_the_demo_left_it()
    lake = pointers(SqlCatalog("lakehouse", uri=f"sqlite:///{home / 'catalog.db'}"))
    assert {("lake", "bronze_events"), ("lake", "silver_events"), ("lake", "gold_daily_activity")} <= lake.keys()
    with RestCatalogServer(tmp_path / "rest-server", catalog_uri=f"jdbc:sqlite:{tmp_path / 'rest.db'}",
                           warehouse=(home / "warehouse").as_uri(), rules=catalog_rules()) as server:
        to_rest = run(f"{VENV}/bin/lakehouse catalog migrate --to '{server.settings_uri('pipeline')}'")
        assert to_rest.returncode == 0, to_rest.stdout + to_rest.stderr
        back = run(f"{VENV}/bin/lakehouse catalog migrate --to 'sqlite:///{tmp_path / 'back.db'}'",
                   LAKEHOUSE_CATALOG_URI=server.settings_uri("pipeline"))
        assert back.returncode == 0, back.stdout + back.stderr
        through = pointers(SqlCatalog("lakehouse", uri=f"sqlite:///{tmp_path / 'rest.db'}"))
    assert through == lake and pointers(SqlCatalog("lakehouse", uri=f"sqlite:///{tmp_path / 'back.db'}")) == lake
