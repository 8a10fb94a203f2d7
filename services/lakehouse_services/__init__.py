"""Servers for trying and testing the platform on one machine: S3 (SeaweedFS), a Spark standalone cluster, a
throwaway PostgreSQL and a Kafka broker. Nothing in the pipeline uses them; `lakehouse s3|cluster|postgres|kafka` and
the tests do."""
