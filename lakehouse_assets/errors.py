"""Every error the platform raises on purpose, in one place.

Each names what failed, on which table or file, and what to do. The CLI turns
them into one line on stderr; Dagster shows them on the failed step.
"""

from __future__ import annotations


class LakehouseError(Exception):
    """Base of the platform's own errors."""


class DeclarationError(LakehouseError, ValueError):
    """A lakehouse declaration (YAML) is invalid: file, line and what is wrong."""

    def __init__(self, file: str, line: int | None, reason: str):
        self.file, self.line, self.reason = file, line, reason
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {reason}")


class ConfigurationError(LakehouseError, ValueError):
    """A setting (environment variable) is missing or malformed."""


class SchemaMismatchError(LakehouseError, ValueError):
    """A write does not fit its table's declared schema."""


class DeclarationDriftError(LakehouseError, RuntimeError):
    """A table differs from its declaration in a way a run does not change by itself (a dropped column, another
    type): the plan's text, and what to run."""


class UpstreamMissingError(LakehouseError):
    """An asset reads a table that has not been materialised yet."""


class ConcurrentCommitError(LakehouseError, RuntimeError):
    """Another writer moved the table's main branch while this write was staged."""


class BalanceError(LakehouseError, RuntimeError):
    """Records in != records kept + records quarantined: something would be lost or duplicated."""


class SparkConfigConflict(LakehouseError, RuntimeError):
    """The process already runs a SparkSession with other catalog settings."""


class MissingJarError(LakehouseError, RuntimeError):
    """A jar Spark needs is not installed (`make setup` fetches them)."""


class MaintenanceError(LakehouseError, RuntimeError):
    """A maintenance action (compaction, expiry, orphan removal, purge) could not finish."""


class SnapshotError(LakehouseError, LookupError):
    """An operator asked for a snapshot, tag or point in time that the table does not have."""


class CatalogUnreachableError(LakehouseError, RuntimeError):
    """The catalog's database could not be reached or refused the connection (named without its password)."""


class KafkaUnreachableError(LakehouseError, RuntimeError):
    """The Kafka cluster could not be reached, or refused the connection or the sign-in (named without the
    password)."""


class PublishedError(LakehouseError, RuntimeError):
    """A write reached main and something after it failed: never to be retried (it would be written twice)."""


class RetentionGapError(LakehouseError, RuntimeError):
    """Offsets of a topic that were never taken are gone (its retention deleted them): what was asked for would be
    short."""
