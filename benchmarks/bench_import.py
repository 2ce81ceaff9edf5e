"""Start-up benchmark: ``import cognoxium`` and ``cognoxium --help`` against their dependencies.

Runs, each in a fresh Python process and in the same run, round by round in
alternating order (the machine is noisy, so no command always goes first):

- ``floor``: ``import polars, pyarrow, numpy, pydantic, sqlglot``, the heavy
  dependencies the core imports;
- ``import cognoxium``, the package: its errors, and every other public
  name loaded on first use;
- the core, ``from cognoxium import CognitionFrame, ContextItem, pack``: the
  frame, the items, the engine and packing, as a first use loads them;
- ``cognoxium --help`` and ``cognoxium pack --help``, the console script
  next to this interpreter.

Every child runs with bytecode caches, as an installed wheel has them
(``PYTHONDONTWRITEBYTECODE`` is removed from its environment; one first,
unmeasured round writes the caches of an editable install). Reports the
median and min wall-clock seconds of each command and its median CPU
seconds (user + system, less sensitive to a loaded machine), the ratios
``import cognoxium / floor`` and ``core / floor`` (of medians and of mins,
and of CPU medians for the core), and how many modules each import loads;
writes them as JSON to ``--out`` (default ``benchmarks/results/import.json``).
``run_all.py`` runs it as the ``import`` suite and writes ``import.md`` with
:func:`markdown`.

Targets: ``import cognoxium`` within 1.3x the floor, and the core too (the
package re-exports its names lazily, so the core is the comparison that
counts the engine); ``cognoxium --help`` under 0.6 s.

Usage: ``python benchmarks/bench_import.py [--rounds 15] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from processes import measured

RESULTS = Path(__file__).resolve().parent / "results"
FLOOR_IMPORT = "import polars, pyarrow, numpy, pydantic, sqlglot"
CORE_IMPORT = "from cognoxium import CognitionFrame, ContextItem, pack"
IMPORT_TARGET = 1.3
HELP_TARGET_S = 0.6


def commands() -> dict[str, list[str]]:
    """Each measured command, by name, as its argument list."""
    script = Path(sys.executable).with_name("cognoxium")
    if not script.exists():
        raise SystemExit(f"no console script at {script}: install the package into this venv")
    return {
        "floor": [sys.executable, "-c", FLOOR_IMPORT],
        "import cognoxium": [sys.executable, "-c", "import cognoxium"],
        "core": [sys.executable, "-c", CORE_IMPORT],
        "cognoxium --help": [str(script), "--help"],
        "cognoxium pack --help": [str(script), "pack", "--help"],
    }


def child_env() -> dict[str, str]:
    """The environment of every child: bytecode caches allowed, help at a fixed width."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["COLUMNS"] = "100"
    return env


def run_once(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall-clock and CPU (user + system) seconds of one run of ``command`` in a fresh process."""
    run = measured(command, env=env)
    return run.wall_s, run.cpu_s


def modules_loaded(statement: str, env: dict[str, str]) -> int:
    """How many modules ``statement`` adds to ``sys.modules`` in a fresh process."""
    code = f"import sys; n = len(sys.modules); {statement}; print(len(sys.modules) - n)"
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    return int(run.stdout.strip())


def measure(rounds: int) -> dict[str, Any]:
    """Time every command ``rounds`` times, alternating the order; return the figures."""
    named = commands()
    env = child_env()
    for command in named.values():  # writes bytecode caches; not measured
        run_once(command, env)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in named}
    order = list(named)
    for k in range(rounds):
        for name in order if k % 2 == 0 else order[::-1]:
            times[name].append(run_once(named[name], env))
    figures = {}
    for name, runs in times.items():
        wall, cpu = [w for w, _ in runs], [c for _, c in runs]
        figures[name] = {
            "median_s": round(statistics.median(wall), 4),
            "min_s": round(min(wall), 4),
            "cpu_median_s": round(statistics.median(cpu), 4),
            "runs_s": [round(w, 4) for w in wall],
        }
    floor, ours, core = figures["floor"], figures["import cognoxium"], figures["core"]
    return {
        "rounds": rounds,
        "python": platform.python_version(),
        "cores": os.cpu_count(),
        "floor_statement": FLOOR_IMPORT,
        "core_statement": CORE_IMPORT,
        "commands": figures,
        "import_over_floor_median": round(ours["median_s"] / floor["median_s"], 3),
        "import_over_floor_min": round(ours["min_s"] / floor["min_s"], 3),
        "core_over_floor_median": round(core["median_s"] / floor["median_s"], 3),
        "core_over_floor_min": round(core["min_s"] / floor["min_s"], 3),
        "core_over_floor_cpu": round(core["cpu_median_s"] / floor["cpu_median_s"], 3),
        "help_median_s": figures["cognoxium --help"]["median_s"],
        "help_min_s": figures["cognoxium --help"]["min_s"],
        "modules": {
            "floor": modules_loaded(FLOOR_IMPORT, env),
            "import cognoxium": modules_loaded("import cognoxium", env),
            "core": modules_loaded(CORE_IMPORT, env),
        },
        "targets": {"import_over_floor": IMPORT_TARGET, "help_s": HELP_TARGET_S},
    }


def markdown(result: dict[str, Any]) -> str:
    """A Markdown section: each command's seconds, the ratio to the floor, the targets."""
    shown = {"floor": result["floor_statement"], "core": result["core_statement"]}
    rows = [
        f"| `{shown.get(name, name)}` | {c['median_s']:.3f} | {c['min_s']:.3f} "
        f"| {c['cpu_median_s']:.3f} |"
        for name, c in result["commands"].items()
    ]
    ratio, ratio_min = result["import_over_floor_median"], result["import_over_floor_min"]
    core, core_min = result["core_over_floor_median"], result["core_over_floor_min"]
    modules = result["modules"]
    return (
        f"## Start-up: import and `--help` ({result['rounds']} rounds)\n\n"
        "Each command in a fresh process, the commands alternating round by round, with "
        "bytecode caches. `import cognoxium` loads only the errors (every other name loads "
        "on first use), so the core's row is the one that counts the engine.\n\n"
        "| command | median s | min s | CPU median s |\n|---|---|---|---|\n"
        + "\n".join(rows)
        + "\n\n"
        f"`import cognoxium` / floor: **{ratio:.2f}x** (medians), {ratio_min:.2f}x (mins); "
        f"target {result['targets']['import_over_floor']}x. The core, "
        f"`{result['core_statement']}`, / floor: **{core:.2f}x** (medians), "
        f"{core_min:.2f}x (mins), {result['core_over_floor_cpu']:.2f}x (CPU medians). "
        "`cognoxium --help`: "
        f"**{result['help_median_s']:.3f} s** (median); target under "
        f"{result['targets']['help_s']} s. Modules loaded: {modules['floor']} by the floor, "
        f"{modules['import cognoxium']} by `import cognoxium`, {modules['core']} by the core.\n"
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Parse the arguments, run :func:`measure`, print and write the JSON result."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path, default=RESULTS / "import.json")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("need --rounds >= 1")
    result = measure(args.rounds)
    print(json.dumps({k: v for k, v in result.items() if k != "commands"}, indent=2), flush=True)
    print(markdown(result), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
