"""Exploration only: the Iceberg runtime for Spark 4.0 from the local Maven repository."""
from pathlib import Path

import lakehouse_assets.runtime.jars as jars

JAR = Path("/work/m2/org/apache/iceberg/iceberg-spark-runtime-4.0_2.13/1.10.1/iceberg-spark-runtime-4.0_2.13-1.10.1.jar")
jars.iceberg_runtime_jar = lambda: JAR
