"""File locks, in one place: every lock memctl takes is an flock(2), which goes away with
the process that held it (a killed writer never leaves a store locked).

fcntl exists only on POSIX systems. It is imported here and nowhere else, so that
`import memctl` works on every platform; a command that must lock says so on a
system without it.
"""

from __future__ import annotations

from memctl.errors import StoreError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

LOCK_SH, LOCK_EX, LOCK_NB = 1, 2, 4  # fcntl's values, the same on every POSIX system


def flock(fd: int, operation: int) -> None:
    if fcntl is None:
        raise StoreError("memctl locks its files with flock(2), which this system does not have")
    fcntl.flock(fd, operation)
