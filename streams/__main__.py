"""``python -m streams`` is ``peerwatch`` (used to spawn child processes)."""

from streams.cli import main

main()
