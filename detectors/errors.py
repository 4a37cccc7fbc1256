"""The root of the errors peerwatch raises on purpose.

``except PeerwatchError`` catches each of them and nothing of Python's or a library's
own; every one says what is wrong in one line. Each also keeps the built-in class it
was before the root existed (``ValueError`` for bad input, ``ConnectionError`` for a
refused login, ...), so a caller that catches those still does. The tree (the classes
live beside the code that raises them; the roots of its branches are here)::

    PeerwatchError
    ├── InputError (ValueError)        what came in cannot be read
    │   ├── FrameError                   streams.frames: bytes that are not a frame
    │   ├── RemoteWriteError             streams.ingest.remote_write: a bad write body
    │   ├── MembershipError              streams.ingest.membership: a bad membership event
    │   ├── JobEventError                detectors.advisors.jobs: a bad job event
    │   └── EventsFileError              streams.backtest.events: a bad known-events file
    ├── RulesError (ValueError)        a parameter or a decoded state breaks its rule
    │                                    (detectors.checks, detectors.state_codec)
    ├── CatalogError (ValueError)      a catalog (XID codes, features) or an override file
    │                                    cannot be used (detectors.xid.catalog, streams.catalog)
    ├── BacktestError                  streams.backtest: the backtest cannot run as asked
    │   ├── BadRange, BadSelector, NoSeries
    │   ├── SourceUnreachable
    │   └── SourceRejected ── SourceBusy
    ├── ReportError                    streams.backtest.report: the report cannot be drawn
    ├── KafkaLoginError (ConnectionError)  streams.kafka.options: credentials refused
    ├── WalError (RuntimeError)        streams.ingest.wal: the write-ahead log
    │   ├── WalUnusable                  its directory cannot be written, or is held
    │   └── WalRefused                   a body it did not take (full, a disk error)
    └── OutboxLocked (RuntimeError)    streams.sinks.outbox: another process holds it

The lab's own (``streams.lab``: ``ServiceError``, ``RemoteWriteFailed``) hang from it
too, so a lab command reports them as the service's commands report theirs.
"""

from __future__ import annotations


class PeerwatchError(Exception):
    """An error peerwatch raises on purpose; the message says why in one line."""


class InputError(PeerwatchError, ValueError):
    """What came in (a frame, a request body, an event, a file) cannot be read."""


class RulesError(PeerwatchError, ValueError):
    """A parameter, or a field of decoded state, breaks the rule declared for it."""


class CatalogError(PeerwatchError, ValueError):
    """A catalog (XID codes, features: the shipped one or an override file) cannot be used."""
