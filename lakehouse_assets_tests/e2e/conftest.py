"""One demo lakehouse for the deployment tests: the shop's events and CDC for one day through the whole graph.

It is built as a user builds it, by the commands `make demo` runs (`lakehouse generate`, then
`dagster asset materialize --select '*'`), in a temporary home with its own Dagster instance.
Tests that change it put it back as they found it.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakehouse_assets.settings import Settings

from ..shop import temporary_instance

BIN = Path(sys.executable).parent
DEMO_DAY = dt.date(2025, 1, 1)


@dataclass(frozen=True)
class DemoLake:
    root: Path  # the working directory of its commands
    env: dict[str, str]  # the environment of its commands (LAKEHOUSE_*, DAGSTER_HOME)
    settings: Settings
    dagster_home: Path

    def run(self, *command: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
        """A command of the venv (`lakehouse`, `dagster`, ...) against this lakehouse."""
        done = subprocess.run([str(BIN / command[0]), *command[1:]], env=self.env, cwd=self.root,
                              capture_output=True, text=True, timeout=timeout)
        if check:
            assert done.returncode == 0, f"{' '.join(command)}: exit {done.returncode}\n{done.stderr[-3000:]}"
        return done


@pytest.fixture(scope="session")
def demo_lake(tmp_path_factory) -> DemoLake:
    root = tmp_path_factory.mktemp("demo")
    env, settings, dagster_home = temporary_instance(root, "e2e-demo-key-for-pseudonyms-in-tests")
    lake = DemoLake(root, env, settings, dagster_home)
    lake.run("lakehouse", "generate", "--start", DEMO_DAY.isoformat(), "--days", "1", "--events-per-day", "300",
             "--changes-per-day", "60")
    lake.run("dagster", "asset", "materialize", "-m", "lakehouse_assets.definitions", "--select", "*",
             "--partition", DEMO_DAY.isoformat(), timeout=900)
    return lake
