"""The jars Spark loads are those jars.tsv names, by coordinates and sha256, from the installation's local
repository: resolved once from a repository or a folder, refused when their bytes are not the named ones, and
the JVM's class path holds them and nothing from another Python package; the local Kafka broker's jars, named there
too, are resolved with them and never loaded by Spark (the broker's own class path: services/test_kafka_broker.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lakehouse_assets.runtime import jars, java_jar


@pytest.fixture
def installed() -> Path:
    """The installation's own local repository (make setup resolved it), as a folder to resolve from."""
    return jars.local_repository()


def test_every_jar_is_resolved_from_a_folder_and_a_second_resolve_needs_no_source(tmp_path, installed,
                                                                                    monkeypatch):
    flat = tmp_path / "flat"  # a folder of jars side by side, as a user without Maven access would bring them
    flat.mkdir()
    for jar in jars.coordinates():
        shutil.copyfile(jar.path(installed), flat / jar.file_name)
    repository = tmp_path / "m2"
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(repository))
    with pytest.raises(jars.MissingJarError, match="make setup") as missing:
        jars.spark_jars({"sqlite"}, on_s3=False, extra_jars=())
    assert "org.apache.iceberg:iceberg-spark-runtime" in str(missing.value)

    paths = jars.resolve(str(flat))
    assert paths == [repository / jar.relative for jar in jars.coordinates()]
    assert all(path.read_bytes() == jar.path(installed).read_bytes() for path, jar in zip(paths, jars.coordinates()))
    # Resolved: nothing is fetched again, from a source that no longer answers.
    assert jars.resolve("http://127.0.0.1:9/nothing-here") == paths


def test_a_jar_whose_bytes_are_not_the_named_ones_is_refused_and_not_kept(tmp_path, installed, monkeypatch):
    first = jars.coordinates()[0]
    mirror = tmp_path / "mirror"  # Maven's layout, one jar changed by a byte
    for jar in jars.coordinates():
        (mirror / jar.relative).parent.mkdir(parents=True, exist_ok=True)  # (a jar two uses name)
        shutil.copyfile(jar.path(installed), mirror / jar.relative)
    changed = bytearray((mirror / first.relative).read_bytes())
    changed[len(changed) // 2] ^= 1
    (mirror / first.relative).write_bytes(bytes(changed))
    monkeypatch.setenv(jars.JARS_DIR_ENV, str(tmp_path / "m2"))
    monkeypatch.setenv(jars.REPOSITORY_ENV, str(mirror))
    with pytest.raises(jars.MissingJarError, match=f"{first.coordinates} .* has sha256 .* refused"):
        jars.resolve()
    assert not any((tmp_path / "m2").rglob("*.jar*"))


def test_the_jars_of_a_use_are_loaded_only_with_it(installed):
    named = {jar.use: [] for jar in jars.coordinates()}
    for jar in jars.coordinates():
        named[jar.use].append(str(jar.path(installed)))
    assert jars.spark_jars({"postgresql"}, on_s3=False, extra_jars=("/x.jar",)) == [
        *named["iceberg"], *named["postgresql"], *named["kafka"], "/x.jar"]
    assert jars.spark_jars({"sqlite"}, on_s3=True, extra_jars=()) == [*named["iceberg"], *named["sqlite"],
                                                                     *named["s3"], *named["kafka"]]
    # The broker's and Kafka Connect's jars are for JVMs of their own: no setting puts one into Spark's.
    assert named[jars.KAFKA_BROKER] and named[jars.KAFKA_CONNECT]
    everything = jars.spark_jars({"sqlite", "postgresql", jars.KAFKA_BROKER, jars.KAFKA_CONNECT}, on_s3=True,
                                 extra_jars=())
    assert not set(everything) & set(named[jars.KAFKA_BROKER] + named[jars.KAFKA_CONNECT])


def test_the_jvm_loads_the_named_jars_and_none_from_another_python_package(spark, lake_settings):
    """The session's jars (spark.jars: Iceberg, the three catalogs' drivers, S3A, the project's) are the files of
    jars.tsv's Spark uses and the project's jar, and nothing on the driver's class path comes from a Python package
    other than pyspark."""
    context = spark.sparkContext
    files = sorted([*(str(jar.path()) for jar in jars.coordinates() if jar.use in jars.SPARK_USES),
                    str(java_jar.jar_file())])
    assert sorted(context.getConf().get("spark.jars").split(",")) == files
    added = context._jsc.sc().listJars().mkString("\n").splitlines()  # spark://host:port/jars/<name>
    assert sorted(url.rsplit("/", 1)[-1] for url in added) == sorted(Path(file).name for file in files)
    class_path = context._jvm.System.getProperty("java.class.path").split(":")
    site_packages = [entry for entry in class_path if "site-packages" in entry]
    assert site_packages and all("/site-packages/pyspark/" in entry for entry in site_packages), site_packages
