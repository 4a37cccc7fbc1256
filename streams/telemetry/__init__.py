"""peerwatch's own metrics and logs, shared by every process."""
