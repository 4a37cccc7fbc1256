"""One progress bar for long commands (evaluate, and later backtest), on stderr.

Drawn only when stderr is a terminal, so piped JSON and CI logs stay clean.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@contextmanager
def progress(total: int, unit: str) -> Iterator[Callable[[str], None]]:
    """Yield ``advance(what)``: one more of ``total`` done, ``what`` the last one finished."""
    console = Console(stderr=True)
    bar = Progress(
        TextColumn(f"[bold]{unit}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        disable=not sys.stderr.isatty(),
        transient=False,
    )
    with bar:
        task = bar.add_task("", total=total)

        def advance(what: str) -> None:
            bar.update(task, advance=1, description=what)

        yield advance
