"""`peerwatch worker`'s flags for its HTTP server: --web-host / --web-port (the name
--metrics-port it had before 0.1.0 was never released: it is gone). An out-of-range port
stops the command at its settings, before any Kafka, and the error names the setting."""

from __future__ import annotations

from click.testing import CliRunner

from streams.cli import main

REFUSED = "ValidationError: worker_web_port: Input should be less than or equal to 65535"


def run(*args: str) -> tuple[int, str, str]:
    done = CliRunner().invoke(main, ["worker", *args], env={"PEERWATCH_WORKER_WEB_PORT": None})
    return done.exit_code, done.stdout, done.stderr


def test_the_port_flag_sets_the_worker_web_port() -> None:
    code, _, err = run("--web-port", "70000")
    assert code == 1 and REFUSED in err, err


def test_the_old_flag_name_is_refused() -> None:
    code, _, err = run("--metrics-port", "6067")
    assert code == 2 and "No such option: --metrics-port" in err, err


def test_help_names_web_host_and_web_port_only() -> None:
    code, out, _ = run("--help")
    assert code == 0
    assert "--web-host" in out and "--web-port" in out
    assert "--metrics-port" not in out
