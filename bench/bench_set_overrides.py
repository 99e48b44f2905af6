"""`--set` with many keys (issue 10): time of `airvisor check demo --set ...` and of loading a
profile with as many bad keys, for 1k / 16k / 64k keys.

    .venv/bin/python bench/bench_set_overrides.py [--keys 1000 16000 64000] [--timeout 120]

Cases, each in a fresh interpreter (`python -c`, the repository first on sys.path, or the tree
given with --tree, e.g. an older commit unpacked with `git archive`):

- check: `airvisor check demo --set prime_rl.overrides.kI=I ...` in-process (click's CliRunner:
  64k pairs are too long for one exec's argv), from parsing the pairs to the printed plan
  (prime-rl unreachable here, so airvisor's own reading of the config folds every key in).
- bad keys: `load_profile("demo", {"health.bogusI": I ...})`, every key refused and named.
- rl flags: the demo `rl` stand-in reading its command line with N `--kI.vJ value` flags (what
  a launched run parses).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CASES = {
    "check": """
from click.testing import CliRunner
from airvisor.cli import main
args = ["check", "demo"]
for i in range(N):
    args += ["--set", f"prime_rl.overrides.k{i}={i}"]
result = CliRunner().invoke(main, args)
assert result.exit_code == 0, result.output[-2000:]
""",
    "bad keys": """
from airvisor.profile import ProfileError, load_profile
try:
    load_profile("demo", {f"health.bogus{i}": i for i in range(N)})
except ProfileError as err:
    assert len(err.problems) == N
""",
    "rl flags": """
from airvisor.demo._rl import lenient_config
flags = [a for i in range(N) for a in (f"--k{i % 100}.v{i}", str(i))]
assert sum(len(t) for t in lenient_config(flags).values()) == N
""",
}

TIMER = """
import sys, time
sys.path.insert(0, TREE)
N = COUNT
started = time.perf_counter()
{body}
print(time.perf_counter() - started)
"""


def run_case(tree: Path, body: str, count: int, timeout: float) -> float | None:
    code = TIMER.format(body=body).replace("TREE", json.dumps(str(tree))).replace(
        "COUNT", str(count))
    try:
        done = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True,
                              text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return None
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"case failed:\n{err.stderr[-3000:]}") from None
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, nargs="+", default=[1000, 16000, 64000])
    parser.add_argument("--tree", type=Path, default=REPO,
                        help="the airvisor source tree to time (default: this checkout)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds per case before it is reported as over the limit")
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    args = parser.parse_args()
    print(f"tree {args.tree}")
    print(f"| case | {' | '.join(f'{n:,} keys' for n in args.keys)} |")
    print(f"| --- |{' --- |' * len(args.keys)}")
    for name in args.cases:
        cells = []
        for count in args.keys:
            seconds = run_case(args.tree, CASES[name], count, args.timeout)
            cells.append(f"> {args.timeout:.0f} s" if seconds is None else f"{seconds:.2f} s")
            if seconds is None:
                cells += ["not run"] * (len(args.keys) - len(cells))
                break
        print(f"| {name} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
