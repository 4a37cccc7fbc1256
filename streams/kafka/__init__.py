"""Kafka plumbing every process shares: client options (log-in) and topic creation."""
