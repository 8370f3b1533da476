"""`memctl` and `python -m memctl`: hand the call to the store's resident server when one runs
(memctl/server/client.py, standard library only), else run the command line in this process."""

import sys


def main() -> None:
    from memctl.server.client import forward

    try:
        code = forward(sys.argv[1:])
    except KeyboardInterrupt:  # a second Ctrl-C while the server's command stops
        sys.exit(130)
    if code is not None:
        sys.exit(code)
    from memctl.cli import main as run_here

    run_here()


if __name__ == "__main__":
    main()
