"""`peerwatch backtest`: an operator's own history through the live pipeline, in event time.

``victoriametrics`` / ``prometheus`` read it chunk by chunk (``history`` holds what
they share), ``run`` feeds it to the ingest's frame builder and the worker's
``Pipeline`` (``streams.worker.offline``), ``summary`` / ``report`` turn the scored
buckets into report.json and report.html.
"""
