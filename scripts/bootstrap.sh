#!/usr/bin/env bash
# Create .venv (once) and install memctl with its test tools into it.
# torch is installed first and pinned, so sentence-transformers does not pick
# another. Pinning does not choose CPU or CUDA: from PyPI on Linux this is the
# CUDA build (gigabytes); a torch 2.13.0 already in .venv (e.g. the CPU build
# from https://download.pytorch.org/whl/cpu, see README) is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
