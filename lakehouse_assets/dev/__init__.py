"""Tools for trying the platform locally (a throwaway S3 server); nothing in the pipeline uses them."""
