"""The driver JVM's options: the class-data archive, named by what it depends on, used only when present and
wanted, and never the reason a process cannot start; and the garbage collector a run's JVM uses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import asset, materialize

from lakehouse_assets.runtime import java_jar, jvm_archive
from lakehouse_assets.runtime.resource import NEW_BYTES_TAG, QUICK_JIT_MAX_BYTES, LakehouseResource
from lakehouse_assets.runtime.spark import COMPILE_HUGE_METHODS, QUICK_JIT, jvm_option, spark_conf
from lakehouse_assets.settings import Settings


def test_the_archive_is_named_by_the_java_it_was_made_for_and_used_only_when_built_and_wanted(tmp_path, monkeypatch):
    monkeypatch.setattr(jvm_archive, "_folder", lambda: tmp_path)
    installed = jvm_archive.archive_file()
    assert installed is not None and installed.parent == tmp_path
    settings = Settings(home=tmp_path / "home")
    assert "SharedArchiveFile" not in spark_conf(settings)["spark.driver.extraJavaOptions"]  # not built yet

    installed.write_bytes(b"archive")
    assert "SharedArchiveFile" not in spark_conf(settings)["spark.driver.extraJavaOptions"]  # its size not recorded
    installed.with_suffix(".size").write_text("7")
    options = spark_conf(settings)["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={installed}" in options and "-Dlog4j2.configurationFile=" in options
    off = spark_conf(settings.with_(jvm_archive=False))["spark.driver.extraJavaOptions"]
    assert "SharedArchiveFile" not in off
    installed.write_bytes(b"archiv")  # cut off: not the size it was written with
    assert "SharedArchiveFile" not in spark_conf(settings)["spark.driver.extraJavaOptions"]
    installed.write_bytes(b"archive")

    other_java = tmp_path / "jdk" / "bin" / "java"
    other_java.parent.mkdir(parents=True)
    other_java.write_text("#!/bin/sh\n")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert jvm_archive.archive_file() not in (None, installed)  # another Java: another archive, not built
    assert "SharedArchiveFile" not in spark_conf(settings)["spark.driver.extraJavaOptions"]


def _archive_folder(tmp_path: Path, cut: bool) -> Path:
    """A folder with the installation's archive (cut off to 1 MiB, with the size recorded as cut, or whole) and
    the project's jar (looked for in the same folder: the installation's, so that the process does not build it)."""
    built = jvm_archive.archive_file()
    assert built is not None and built.is_file(), "make setup builds the archive: run it first"
    folder = tmp_path / "archives"
    folder.mkdir()
    if cut:
        with built.open("rb") as whole:
            (folder / built.name).write_bytes(whole.read(1 << 20))
        (folder / built.name).with_suffix(".size").write_text(str(1 << 20))
    else:
        (folder / built.name).symlink_to(built)
        shutil.copyfile(built.with_suffix(".size"), (folder / built.name).with_suffix(".size"))
    shutil.copyfile(java_jar.jar_file(), folder / java_jar.jar_file().name)
    return folder


def _start_session(tmp_path: Path, folder: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    code = f"""
from pathlib import Path
from lakehouse_assets.runtime import jvm_archive
jvm_archive._folder = lambda: Path({str(folder)!r})
from lakehouse_assets.runtime.resource import LakehouseResource
spark = LakehouseResource(home={str(tmp_path / 'home')!r}).spark
print("rows", spark.range(3).count())
print("options", spark.conf.get("spark.driver.extraJavaOptions"))
"""
    # The crashing JVM writes its error report into the working folder.
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, **(env or {})})


def _archive_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("lakehouse-java-"))  # not the jar


@pytest.mark.slow
def test_a_damaged_archive_is_set_aside_and_the_session_starts_without_it(tmp_path):
    """An archive the size check cannot tell from a good one (here cut off, with the size recorded as cut) makes
    the JVM die at start (SIGBUS while mapping it): the session is started again without it, and the archive is
    moved aside so later processes do not try it."""
    folder = _archive_folder(tmp_path, cut=True)
    name = Path(jvm_archive.archive_file().name)  # type: ignore[union-attr]
    result = _start_session(tmp_path, folder)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rows 3" in result.stdout
    options = next(line for line in result.stdout.splitlines() if line.startswith("options"))
    assert "SharedArchiveFile" not in options
    assert _archive_files(folder) == sorted([name.with_suffix(".unusable").name, name.with_suffix(".size").name])


def test_a_start_that_fails_for_another_reason_keeps_the_archive(tmp_path):
    """A session that cannot start with or without the archive (here a driver memory the JVM refuses) fails with
    the JVM's error, and the good archive stays where every later start finds it."""
    folder = _archive_folder(tmp_path, cut=False)
    before = _archive_files(folder)
    result = _start_session(tmp_path, folder, {"LAKEHOUSE_DRIVER_MEMORY": "lots"})
    assert result.returncode != 0
    assert "Invalid maximum heap size" in result.stdout + result.stderr, result.stderr[-3000:]
    assert _archive_files(folder) == before


def test_the_jit_compiles_the_huge_methods_spark_generates(spark):
    """A whole stage's generated method runs past HotSpot's 8,000 bytes of bytecode (a source's parse, typing and
    reasons): the driver's JVM, which runs the local executor's tasks, compiles it rather than interpreting every
    row, and a cluster's executors are given the same option."""
    assert jvm_option(spark, "DontCompileHugeMethods") == "false"
    conf = spark_conf(Settings(home=Path("/nonexistent")))
    assert COMPILE_HUGE_METHODS in conf["spark.executor.extraJavaOptions"].split()
    assert COMPILE_HUGE_METHODS in conf["spark.driver.extraJavaOptions"].split()


def test_a_runs_jvm_collects_for_throughput_unless_jdk_java_options_picks_a_collector(spark, monkeypatch):
    """The session's JVM runs the parallel collector (the endpoint's runs G1: serving/test_serve.py); a collector
    given in JDK_JAVA_OPTIONS is the JVM's alone, as two would stop it from starting."""
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    assert sorted(bean.getName() for bean in beans) == ["PS MarkSweep", "PS Scavenge"]
    settings = Settings(home=Path("/nonexistent"))
    monkeypatch.delenv("JDK_JAVA_OPTIONS", raising=False)
    assert "-XX:+UseParallelGC" in spark_conf(settings)["spark.driver.extraJavaOptions"]
    assert "-XX:+UseG1GC" in spark_conf(settings.with_(jvm_gc="g1"))["spark.driver.extraJavaOptions"]
    monkeypatch.setenv("JDK_JAVA_OPTIONS", "-Xss4m -XX:+UseSerialGC")
    assert "GC" not in spark_conf(settings)["spark.driver.extraJavaOptions"]
    with pytest.raises(ValueError, match="jvm_gc: 'zgc' is not one of parallel, g1"):
        spark_conf(settings.with_(jvm_gc="zgc", jvm_archive=False))


def test_a_small_landing_run_compiles_with_c1_alone_and_any_other_run_with_the_tiered_jit(spark, tmp_path,
                                                                                          monkeypatch):
    """jvm_jit auto: a run the landing sensor requested for at most QUICK_JIT_MAX_BYTES of new files gets C1 alone
    (driver and executors); a larger one, or a run without the sensor's tag (a backfill, a run by hand), the JVM's
    tiered JIT, as the stream and the SQL endpoint do; LAKEHOUSE_JVM_JIT decides for every run when set."""
    seen = []

    @asset
    def probe(lakehouse: LakehouseResource) -> None:
        seen.append(lakehouse.settings.jvm_jit)

    def jit(tags: dict[str, str]) -> str:
        resource = LakehouseResource(home=str(tmp_path / "lake"))
        assert materialize([probe], resources={"lakehouse": resource}, tags=tags).success
        return seen[-1]

    monkeypatch.delenv("LAKEHOUSE_JVM_JIT", raising=False)
    assert jit({NEW_BYTES_TAG: "20000"}) == "quick"
    assert jit({NEW_BYTES_TAG: str(QUICK_JIT_MAX_BYTES)}) == "quick"
    assert jit({NEW_BYTES_TAG: str(QUICK_JIT_MAX_BYTES + 1)}) == "full"
    assert jit({}) == "auto"
    monkeypatch.setenv("LAKEHOUSE_JVM_JIT", "full")
    assert jit({NEW_BYTES_TAG: "20000"}) == "full"
    monkeypatch.setenv("LAKEHOUSE_JVM_JIT", "quick")
    assert jit({}) == "quick"
    monkeypatch.setenv("LAKEHOUSE_JVM_JIT", "fast")
    with pytest.raises(ValueError, match="LAKEHOUSE_JVM_JIT='fast': expected one of auto, quick, full"):
        Settings.from_env(home=tmp_path / "lake")

    settings = Settings(home=Path("/nonexistent"), jvm_archive=False)
    for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
        assert set(QUICK_JIT.split()) <= set(spark_conf(settings.with_(jvm_jit="quick"))[key].split())
        assert "TieredStopAtLevel" not in spark_conf(settings.with_(jvm_jit="auto"))[key]
        assert "TieredStopAtLevel" not in spark_conf(settings.with_(jvm_jit="full"))[key]
    # The option as the session's JVM took it: C1 alone, as the tests' JVMs are started (conftest.py), unless
    # SPARK_SUBMIT_OPTS said otherwise.
    alone = "-XX:TieredStopAtLevel=1" in os.environ.get("SPARK_SUBMIT_OPTS", "").split()
    assert jvm_option(spark, "TieredStopAtLevel") == ("1" if alone else "4")
