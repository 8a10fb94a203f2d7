"""Servers for trying and testing the platform on one machine: S3 (SeaweedFS), a Spark standalone cluster and a
throwaway PostgreSQL. Nothing in the pipeline uses them; `lakehouse s3|cluster|postgres` and the tests do."""
