"""Whole-process measurements for the benchmarks: wall and CPU seconds, peak memory.

A benchmark that times the user's whole call runs it as a new process. The
figures of one run come from a small wrapper process that starts the command,
waits for it and reads its own children's resource usage: the CPU seconds
(user + system) and the peak resident memory are the command's alone, never
those of earlier runs or of the benchmark itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Measured", "measured"]

WRAPPER = """
import json, resource, subprocess, sys, time
cwd = sys.argv[1] or None
start = time.perf_counter()
done = subprocess.run(sys.argv[2:], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                      text=True)
wall = time.perf_counter() - start
used = resource.getrusage(resource.RUSAGE_CHILDREN)
if done.returncode:
    sys.exit(f"{sys.argv[2:]} exited with {done.returncode}: {done.stderr}")
print(json.dumps({"wall_s": wall, "cpu_s": used.ru_utime + used.ru_stime,
                  "peak_mb": used.ru_maxrss / 1024}))
"""


@dataclass(frozen=True)
class Measured:
    """One run of a command in a new process.

    Attributes
    ----------
    wall_s
        Wall-clock seconds from its start to its exit.
    cpu_s
        CPU seconds (user + system) of the command and its own children.
    peak_mb
        Peak resident memory, in MiB, of the largest process among them.
    """

    wall_s: float
    cpu_s: float
    peak_mb: float


def measured(
    command: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Measured:
    """Run ``command`` once in a new process and measure it.

    Raises
    ------
    subprocess.CalledProcessError
        If the command exits with a non-zero status (its standard error is in
        the wrapper's message).
    """
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, str(cwd or ""), *command],
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        check=True,
    )
    return Measured(**json.loads(done.stdout))
