"""A local lake's files are written through the project's local file system (java/.../LocalFiles.java): Hadoop's,
checksum files included, with each file's permissions set by Java rather than by a `chmod` process per file."""

from __future__ import annotations

import stat
from pathlib import Path

from lakehouse_assets.runtime.spark import jvm_class


def test_the_sessions_files_go_through_the_project_file_system_with_hadoops_checksums_and_modes(spark, lakehouse):
    conf = jvm_class(spark, "org.apache.hadoop.conf.Configuration")()  # any caller's configuration
    warehouse = jvm_class(spark, "java.net.URI").create(Path(lakehouse.settings.home).as_uri())
    assert jvm_class(spark, "org.apache.hadoop.fs.FileSystem").get(warehouse, conf).getClass().getName() \
        == "lakehouse.LocalFiles"

    table = lakehouse.table_id("files_probe")
    spark.sql(f"CREATE TABLE {table} (id bigint) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1), (2)")
    data = [Path(p.removeprefix("file:")) for (p,) in spark.sql(f"SELECT file_path FROM {table}.files").collect()]
    metadata = Path(lakehouse.iceberg_table("files_probe").metadata_location.removeprefix("file:"))
    for written in (*data, metadata):
        assert stat.S_IMODE(written.stat().st_mode) == 0o644, written  # 0666 less Hadoop's umask, as before
        assert (written.parent / f".{written.name}.crc").is_file(), "Hadoop's checksum file beside it"
    assert spark.table(table).count() == 2
