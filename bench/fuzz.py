"""Fuzz peerwatch's decoders with generated and mutated inputs; report crashes and hangs.

    python -m bench.fuzz [--decoder remote_write|xid_log|settings|xid_catalog|all]
                         [--n 100000] [--seed 0] [--out fuzz-findings]

Each input is either freshly generated (``bench.fuzz_targets``: structured inputs with
the probe shapes of issue 9) or a mutation of a corpus entry (bit flips, interesting
bytes, dictionary tokens, deletions, repeats, splices). Outcomes per input:

- *accepted* / *rejected*: the decoder returned, or raised its own error type;
- *crash*: any other exception escaped;
- *wrong*: the decoder returned, but an oracle disagreed (``fuzz_targets.Wrong``);
- *hang*: one input took more than ``--hang-s`` (1 s) of CPU time in the decoder (CPU,
  not wall time: the machine's other load must not count).

Inputs with an outcome not seen before (exception type and message head) join the
corpus, a cheap stand-in for coverage feedback. Crashes, wrong answers and hangs are
written to ``--out`` as ``<decoder>-<kind>-<n>.bin`` (the input bytes, as
``fuzz_targets`` describes them). The exit status is 1 if there was any.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bench.fuzz_targets import TARGETS, Target, Wrong

_INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0x0A, 0x12, 0x09, 0x10)
_CORPUS_MAX = 2_000


@dataclass
class Report:
    decoder: str
    inputs: int = 0
    accepted: int = 0
    rejected: int = 0
    crashes: Counter[str] = field(default_factory=Counter)
    wrong: Counter[str] = field(default_factory=Counter)
    hangs: int = 0
    slowest_s: float = 0.0
    elapsed_s: float = 0.0
    examples: dict[str, str] = field(default_factory=dict)

    @property
    def failures(self) -> int:
        return sum(self.crashes.values()) + sum(self.wrong.values()) + self.hangs

    def lines(self) -> list[str]:
        rate = self.inputs / self.elapsed_s if self.elapsed_s else 0.0
        out = [
            f"{self.decoder}: {self.inputs} inputs in {self.elapsed_s:.1f} CPU s ({rate:,.0f}/s): "
            f"{self.accepted} accepted, {self.rejected} rejected, "
            f"{sum(self.crashes.values())} crashes, {sum(self.wrong.values())} wrong, "
            f"{self.hangs} hangs; slowest input {self.slowest_s * 1000:.1f} ms"
        ]
        for kind, count in [*self.crashes.items(), *self.wrong.items()]:
            out.append(f"  {count:6d} x {kind}: {self.examples.get(kind, '')}")
        return out


def mutate(
    data: bytes, rng: random.Random, corpus: list[bytes], tokens: tuple[bytes, ...]
) -> bytes:
    """One to four random edits of ``data``."""
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(8)
        at = rng.randrange(len(buf) + 1)
        if op == 0 and buf:  # flip a bit
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:  # an interesting byte
            buf[rng.randrange(len(buf))] = rng.choice(_INTERESTING)
        elif op == 2:  # insert random bytes
            buf[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 3:  # insert a dictionary token
            buf[at:at] = rng.choice(tokens) if tokens else b"\x00"
        elif op == 4 and buf:  # delete a range
            del buf[at : at + rng.randint(1, 16)]
        elif op == 5 and buf:  # repeat a chunk
            chunk = bytes(buf[at : at + rng.randint(1, 32)])
            buf[at:at] = chunk * rng.choice([2, 3, 16, 256])
        elif op == 6 and corpus:  # splice in part of another input
            other = rng.choice(corpus)
            start = rng.randrange(len(other) + 1)
            buf[at:] = other[start:]
        elif op == 7:  # truncate
            del buf[at:]
    return bytes(buf)


def _outcome_key(exc: BaseException) -> str:
    head = re.sub(r"\d+", "N", str(exc).split("\n", 1)[0])[:60]
    return f"{type(exc).__name__}: {head}"


def fuzz(
    target: Target,
    n: int,
    seed: int = 0,
    *,
    hang_s: float = 1.0,
    out: Path | None = None,
    generate_share: float = 0.5,
    probes: bool = True,
) -> Report:
    """Run ``n`` inputs against ``target`` (its fixed probes first); seeded, so a run repeats."""
    rng = random.Random(seed)
    report = Report(target.name)
    corpus = list(target.seeds)
    seen: set[str] = set()
    started = time.process_time()
    fixed = iter(target.probes() if probes else ())
    for i in range(n):
        data = next(fixed, None)
        if data is not None:
            pass
        elif rng.random() < generate_share or not corpus:
            data = target.generate(rng)
        else:
            data = mutate(rng.choice(corpus), rng, corpus, target.tokens)
        kind = key = None
        t0 = time.process_time()
        try:
            target.run(data)
        except Wrong as exc:
            kind, key = "wrong", f"Wrong: {exc}"
            report.wrong[key] += 1
        except target.expected as exc:
            report.rejected += 1
            key = _outcome_key(exc)
        except Exception as exc:  # the finding itself: anything else escaped
            kind, key = "crash", _outcome_key(exc)
            report.crashes[key] += 1
        else:
            report.accepted += 1
            key = "accepted"
        took = time.process_time() - t0 if target.decode_s is None else target.decode_s()
        report.slowest_s = max(report.slowest_s, took)
        if took > hang_s:
            report.hangs += 1
            kind = kind or "hang"
        report.inputs += 1
        if key not in seen:
            seen.add(key)
            if len(corpus) < _CORPUS_MAX and len(data) < 100_000:
                corpus.append(data)
        if kind is not None:
            report.examples.setdefault(key, repr(data[:120]))
            if out is not None:
                out.mkdir(parents=True, exist_ok=True)
                (out / f"{target.name}-{kind}-{i}.bin").write_bytes(data)
    report.elapsed_s = time.process_time() - started
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decoder", default="all", choices=[*TARGETS, "all"])
    parser.add_argument("--n", type=int, default=100_000, help="inputs per decoder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hang-s", type=float, default=1.0)
    parser.add_argument("--out", type=Path, default=Path("fuzz-findings"))
    args = parser.parse_args(argv)
    names = list(TARGETS) if args.decoder == "all" else [args.decoder]
    failures = 0
    for name in names:
        report = fuzz(TARGETS[name](), args.n, args.seed, hang_s=args.hang_s, out=args.out)
        print("\n".join(report.lines()), flush=True)
        failures += report.failures
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
