"""The code's shape: the package's import contracts (setup.cfg [importlinter], run by `make lint`: layers import
downward only, and no two modules of a package import each other, also through imports inside functions or
TYPE_CHECKING), and no function with more branches than a reader can hold."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), "--config", str(tree / "setup.cfg"), "--no-cache"], cwd=tree,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)


@pytest.fixture
def copy(tmp_path) -> Path:
    shutil.copytree(ROOT / "lakehouse_assets", tmp_path / "lakehouse_assets",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "setup.cfg", tmp_path / "setup.cfg")
    return tmp_path


def _add_import(tree: Path, module: str, line: str) -> None:
    path = tree / "lakehouse_assets" / module
    path.write_text(path.read_text() + f"\n\ndef _added():\n    {line}\n")


def test_the_package_keeps_its_contracts(copy):
    result = _lint(copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_a_layer_importing_upward_breaks_the_layers_contract(copy):
    _add_import(copy, "tables/registry.py", "from ..silver import events  # noqa")
    result = _lint(copy)
    assert result.returncode != 0
    assert "lakehouse_assets.tables is not allowed to import lakehouse_assets.silver" in result.stdout


def test_two_modules_importing_each_other_break_the_cycle_contract(copy):
    # publish imports staged; staged importing publish back, even lazily, is a cycle
    _add_import(copy, "runtime/staged.py", "from .publish import publish  # noqa")
    result = _lint(copy)
    assert result.returncode != 0
    assert "No cycles are allowed in lakehouse_assets.runtime" in result.stdout


def _blocks(blocks):
    """Every function, method and function inside a function that radon measured."""
    for block in blocks:
        yield block
        yield from _blocks(getattr(block, "methods", []))
        yield from _blocks(getattr(block, "closures", []))


MOST_BRANCHES = 20  # radon's cyclomatic complexity: the branches of a function a reader can hold at once


def test_no_function_has_more_branches_than_a_reader_can_hold():
    from radon.complexity import cc_visit

    dense = set()
    for folder in ("lakehouse_assets", "services", "benchmarks", "examples", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for block in _blocks(cc_visit(path.read_text())):
                if block.complexity > MOST_BRANCHES:
                    dense.add(f"{path.relative_to(ROOT)}:{block.lineno} {block.name} ({block.complexity})")
    assert not dense, "functions above complexity 20:\n" + "\n".join(sorted(dense))
