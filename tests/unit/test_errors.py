"""One error root: every exception class peerwatch defines is a ``PeerwatchError``, keeps
the built-in class its callers caught before, and the CLI prints it as ``Type: message``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from click.testing import CliRunner

import detectors
import streams
from detectors.errors import InputError, PeerwatchError, RulesError
from detectors.state_codec import decode_array
from streams.cli import main
from streams.frames import FrameError, decode_frame


def defined_errors() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in (streams, detectors):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for name, obj in inspect.getmembers(module, inspect.isclass):
                if issubclass(obj, BaseException) and obj.__module__ == info.name:
                    found[f"{info.name}.{name}"] = obj
    return found


def test_every_error_peerwatch_defines_hangs_from_the_root() -> None:
    errors = defined_errors()
    assert len(errors) >= 15  # the tree in detectors.errors' docstring
    assert [n for n, cls in errors.items() if not issubclass(cls, PeerwatchError)] == []


def test_the_errors_keep_the_built_in_class_callers_catch() -> None:
    errors = {n.rsplit(".", 1)[1]: cls for n, cls in defined_errors().items()}
    for name in ("FrameError", "RemoteWriteError", "MembershipError", "JobEventError"):
        assert issubclass(errors[name], InputError) and issubclass(errors[name], ValueError)
    assert issubclass(errors["KafkaLoginError"], ConnectionError)
    assert issubclass(errors["OutboxLocked"], RuntimeError)


def test_malformed_input_and_state_raise_their_branch() -> None:
    try:
        decode_frame(b"not a frame")
    except FrameError as exc:
        assert isinstance(exc, InputError)
    else:
        raise AssertionError("decode_frame took garbage")
    try:
        decode_array(17, "<f8", (2,), "state.mean")
    except RulesError as exc:
        assert "state.mean" in str(exc)
    else:
        raise AssertionError("decode_array took a number")


def test_the_cli_prints_a_peerwatch_error_as_type_and_message(tmp_path) -> None:
    """Through the one handler of every command (``_Commands``), without a traceback."""
    bad = tmp_path / "events.jsonl"
    bad.write_text("{not json\n")
    result = CliRunner().invoke(
        main,
        ["backtest", "--source", "victoriametrics", "--url", "http://127.0.0.1:9",
         "--selector", '{job="x"}', "--events", str(bad), "--start", "2026-01-01T00:00:00Z",
         "--end", "2026-01-01T01:00:00Z", "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert result.output.startswith("Error: EventsFileError: "), result.output
