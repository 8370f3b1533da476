"""`python -m memctl`: the same as the `memctl` command."""

from .cli import main

main()
