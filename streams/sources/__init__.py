"""Where data comes from besides remote_write: kernel log lines (``peerwatch xid-log``),
and history exports for replays."""
