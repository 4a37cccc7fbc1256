"""`peerwatch worker`'s flags for its HTTP server: --web-host / --web-port, and the old
--metrics-port still accepted (hidden, with a deprecation notice). An out-of-range port
stops the command at its settings, before any Kafka, and the error names the setting."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from streams.cli import main

REFUSED = "ValidationError: worker_web_port: Input should be less than or equal to 65535"


def run(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(main, ["worker", *args], env={"PEERWATCH_WORKER_WEB_PORT": None})
    return done.exit_code, done.stdout, done.stderr


@pytest.mark.parametrize("flag", ["--web-port", "--metrics-port"])
def test_both_port_flags_set_the_worker_web_port(flag: str) -> None:
    code, _, err = run(flag, "70000")
    assert code == 1 and REFUSED in err, err


def test_the_old_flag_says_it_is_deprecated_and_the_new_one_does_not() -> None:
    assert "deprecated" in run("--metrics-port", "70000")[2]
    assert "deprecated" not in run("--web-port", "70000")[2]


def test_giving_both_names_is_a_usage_error() -> None:
    code, _, err = run("--web-port", "6066", "--metrics-port", "6067")
    assert code == 2 and "--metrics-port is the old name of --web-port" in err, err


def test_help_names_web_host_and_web_port_only() -> None:
    code, out, _ = run("--help")
    assert code == 0
    assert "--web-host" in out and "--web-port" in out
    assert "--metrics-port" not in out
