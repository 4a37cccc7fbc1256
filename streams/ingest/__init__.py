"""Remote-write ingest: decode Prometheus samples and build per-node frames."""
