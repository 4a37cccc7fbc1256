"""A backtest report from a simulated history, rendered in headless Chromium to a PNG.

    apt-get install -y chromium        # Debian's package; not in .ci/run (CI time)
    python -m bench.report_screenshot --scenario fault-mix --seed 1 \\
        --out docs/img/backtest-report.png --html /tmp/backtest-report.html

The scenario's scrape rounds go through the live path (``streams.worker.offline``: the
ingest's frame builder, the worker's ``Pipeline``) into the backtest's
:class:`~streams.backtest.summary.Accumulator`, with the scenario's labelled
faults as the known events (an XID fault at its XID, ``xid<code>``; any other
fault from its onset to its end, by kind; job deaths by group), so the report reads as a
backtest of a history whose failures an operator logged. Chromium runs
without a sandbox (it runs as root here), network, GPU or profile of its own;
the page is captured in one tall window, the white below it cropped, and saved
in 256 colours.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streams.backtest.report import render_html
from streams.backtest.summary import Accumulator, KnownEvent
from streams.lab.simulator.faults import JOB_DEATH, GroundTruth
from streams.lab.simulator.scenarios import get_scenario
from streams.worker.offline import score_rounds

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
)


def known_events(truth: list[GroundTruth], group: str) -> list[KnownEvent]:
    """What an operator would have logged: XIDs, other faults by kind, job deaths."""
    out = []
    for t in truth:
        if t.is_fault and t.node is not None:
            if t.xid_ms is not None:
                out.append(KnownEvent(t.xid_ms, t.node, group, f"xid{t.xid}"))
            else:
                out.append(KnownEvent(t.onset_ms, t.node, group, t.kind, t.end_ms))
        elif t.kind == JOB_DEATH:
            out.append(KnownEvent(t.onset_ms, None, group, "job_death"))
    return out


def backtest_result(scenario_name: str, seed: int) -> dict:
    scenario = get_scenario(scenario_name)
    settings = scenario.settings_for(seed)
    config = scenario.config_for(seed)
    group = config.job_name if config.job_label else config.cluster
    acc = Accumulator(known_events(scenario.ground_truth(seed), group), settings.bucket_ms)
    for _frames, scored in score_rounds(scenario.rounds(seed), settings):
        for item in scored:
            acc.add(item)
    return acc.result()


def screenshot(html_path: Path, png_path: Path, chromium: str, width: int, height: int) -> None:
    """``chromium --headless --screenshot`` of ``html_path``, then the blank bottom cropped."""
    with tempfile.TemporaryDirectory(prefix="peerwatch-chromium-") as profile:
        cmd = [
            chromium,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={png_path}",
            f"--window-size={width},{height}",
            html_path.resolve().as_uri(),
        ]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    _crop_blank_bottom(png_path)


def _crop_blank_bottom(path: Path, margin: int = 24) -> None:
    import numpy as np
    from PIL import Image

    with Image.open(path) as image:
        pixels = np.asarray(image.convert("L"))
        rows = np.flatnonzero((pixels < 250).any(axis=1))
        bottom = min(pixels.shape[0], int(rows[-1]) + margin) if rows.size else pixels.shape[0]
        page = image.convert("RGB").crop((0, 0, pixels.shape[1], bottom))
    # 256 colours hold the page (text, magma, a few alert colours) at a third of the bytes
    page.quantize(colors=256).save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="fault-mix")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("docs/img/backtest-report.png"))
    parser.add_argument("--html", type=Path, help="keep the HTML report here")
    parser.add_argument("--json", type=Path, help="keep the JSON summary here")
    parser.add_argument(
        "--from-json", type=Path, help="render this saved summary instead of running a scenario"
    )
    parser.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--width", type=int, default=1320)
    parser.add_argument("--height", type=int, default=9000, help="before the crop")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    if args.from_json:
        result = json.loads(args.from_json.read_text())
    else:
        result = backtest_result(args.scenario, args.seed)
    scored_s = time.perf_counter() - started
    page = render_html(result)
    with tempfile.TemporaryDirectory(prefix="peerwatch-report-") as tmp:
        html_path = args.html or Path(tmp) / "report.html"
        html_path.parent.mkdir(parents=True, exist_ok=True)
        html_path.write_text(page, encoding="utf-8")
        if args.json and not args.from_json:
            args.json.write_text(json.dumps(result, indent=1, allow_nan=False) + "\n")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        screenshot(html_path, args.out, args.chromium, args.width, args.height)
    lead = result["lead_time"]
    source = args.from_json or f"{args.scenario} seed {args.seed}"
    print(
        f"{source}: {result['buckets']} buckets scored "
        f"in {scored_s:.0f} s; "
        f"{lead['headline']}; {result['false_alerts']['count']} false alerts; "
        f"report {len(page) / 1024:.0f} KiB -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
