"""The package's import contracts (setup.cfg [importlinter], run by `make lint`): layers import downward only,
and no two modules of a package import each other, also through imports inside functions or TYPE_CHECKING."""

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
