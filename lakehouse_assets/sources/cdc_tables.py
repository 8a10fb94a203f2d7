"""The OLTP tables captured by change data capture, declared as data.

Types are simple names ("long", "int", "string", "decimal(12,2)", "timestamp")
so that the generator and the Spark parser read the same declaration.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ORDER_STATUSES = ("pending", "paid", "shipped", "delivered", "cancelled")


@dataclass(frozen=True)
class CdcTableInfo:
    """A captured source table, as data: enough to build typed schemas from."""

    name: str
    connector: str  # "postgresql" or "mysql"
    server: str  # Debezium's topic prefix, `source.name`
    database: str
    db_schema: str | None  # PostgreSQL schema; MySQL has none
    primary_key: tuple[str, ...]
    columns: dict[str, str]  # column -> type name, in row order
    # Columns that appear only from the drift day on (after `columns` in rows).
    drift_columns: dict[str, str] = field(default_factory=dict)

    @property
    def topic(self) -> str:
        parts = [self.server, self.db_schema or self.database, self.name]
        return ".".join(parts)

    @property
    def position_fields(self) -> tuple[str, ...]:
        return ("file", "pos", "row") if self.connector == "mysql" else ("lsn",)


CDC_TABLES: dict[str, CdcTableInfo] = {
    "customers": CdcTableInfo(
        name="customers",
        connector="postgresql",
        server="shop",
        database="shop",
        db_schema="public",
        primary_key=("customer_id",),
        columns={
            "customer_id": "long",
            "email": "string",
            "full_name": "string",
            "country": "string",
            "created_at": "timestamp",
            "updated_at": "timestamp",
        },
        drift_columns={"loyalty_tier": "string"},
    ),
    "orders": CdcTableInfo(
        name="orders",
        connector="postgresql",
        server="shop",
        database="shop",
        db_schema="public",
        primary_key=("order_id",),
        columns={
            "order_id": "long",
            "customer_id": "long",
            "status": "string",
            "total": "decimal(12,2)",
            "order_ts": "timestamp",
            "updated_at": "timestamp",
        },
    ),
    "order_items": CdcTableInfo(
        name="order_items",
        connector="mysql",
        server="fulfilment",
        database="fulfilment",
        db_schema=None,
        primary_key=("order_id", "line_no"),
        columns={
            "order_id": "long",
            "line_no": "int",
            "product_id": "string",
            "quantity": "int",
            "unit_price": "decimal(12,2)",
        },
    ),
}
