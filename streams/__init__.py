"""The I/O shell of peerwatch: Kafka, HTTP, time, files."""
