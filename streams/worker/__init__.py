"""The worker: frames in from Kafka, scored per group's bucket, alerts out (Faust)."""
