"""Every example in the README and docs/ is loaded or run: declarations load, profiles resolve, `lakehouse`
commands parse, Dagster selections select, links lead somewhere, and the README's newcomer path (declare a
source, land a file, materialise gold, read it) runs as written."""

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
    assert "gold_plan_revenue" in project.gold.sql_tables


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


def test_every_other_yaml_example_is_yaml_and_every_python_example_names_what_exists():
    for where, body in _blocks("yaml"):
        assert yaml.safe_load(body), where
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


@pytest.mark.slow
def test_the_readme_newcomer_path_runs_as_written(tmp_path):
    """The README's first source, as a newcomer runs it from the project's root: the declaration saved where the
    README says, its shell blocks run in order, in a shell with nothing of this test run's environment."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Your first source", 1)[1].split("\n## ", 1)[0]
    blocks = FENCE.findall(section)
    assert [lang for lang, _ in blocks] == ["yaml", "bash", "bash"]
    declared_at = re.search(r"\(`([\w/]+\.yaml)`\)", section).group(1)
    (tmp_path / declared_at).parent.mkdir(parents=True)
    (tmp_path / declared_at).write_text(blocks[0][1])
    # The project's root, as a checkout has it after `make setup`: its environment where the Makefile puts it.
    (tmp_path / VENV).symlink_to(BIN.parent, target_is_directory=True)
    (tmp_path / "pyproject.toml").symlink_to(ROOT / "pyproject.toml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEHOUSE_", "DAGSTER_"))}
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
