"""Pure detection logic for peerwatch: arrays and dataclasses in, results out.

Nothing here imports faust, aiokafka, httpx or ``streams``; nothing reads the
clock, a file or the network. State is explicit and serialisable.
"""
