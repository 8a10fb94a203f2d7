"""The errors the local services raise: each names the service, what failed and what to do."""

from __future__ import annotations


class ServiceError(RuntimeError):
    """A local service did not start or stop as asked."""


class MissingBinaryError(ServiceError):
    """A program a service runs (SeaweedFS's `weed`, PostgreSQL's `initdb`, Kafka's `java`) is not installed."""


class S3ServerError(ServiceError):
    """The local S3 server did not start or stop as asked."""


class SparkClusterError(ServiceError):
    """The local Spark standalone cluster did not start or stop as asked."""


class PostgresError(ServiceError):
    """The throwaway PostgreSQL server did not start or stop as asked."""


class KafkaError(ServiceError):
    """The local Kafka broker did not start or stop as asked, or refused what it was asked (a topic)."""


class CatalogServerError(ServiceError):
    """The local REST catalog server did not start or stop as asked."""
