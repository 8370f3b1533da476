"""Cold-process timings as an installed user gets them.

`pip install` writes every module's bytecode at install time, so a user's
first `memctl` call never compiles source. A checkout run with
PYTHONDONTWRITEBYTECODE=1 (set on the machines these benchmarks ran on)
compiles memctl's changed modules in every process instead: 9 modules
made `memctl cache run` 60 ms where it is 50 with bytecode (2026-11-22, quiet). Every timing
benchmark compiles the package first and says so.
"""

from __future__ import annotations

import compileall
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "memctl"


def compile_package() -> None:
    """Write memctl's bytecode, as `pip install` does, before anything is timed."""
    if not compileall.compile_dir(PACKAGE, quiet=1):
        raise SystemExit(f"{PACKAGE}: could not compile the package")
