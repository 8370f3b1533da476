#!/usr/bin/env bash
# Create .venv (once) and install memctl with its test tools into it.
# torch is installed first and pinned: an unpinned torch pulls gigabytes of
# CUDA packages, and sentence-transformers would otherwise ask for one.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
