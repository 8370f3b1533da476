#!/usr/bin/env bash
# Install memctl, then run its main job on the bundled example: ingest a
# three-session chat and a MEMORY.md into a fresh store, then search it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
store=$(mktemp -d)/memory
# The first search starts the store's resident server (README "The resident server"); the demo
# stops it as it ends, however it ends, and leaves no process behind.
trap 'memctl --store "$store" server stop >/dev/null 2>&1 || true' EXIT
set -x
memctl --store "$store" ingest fixtures/demo/chat.jsonl
memctl --store "$store" ingest fixtures/demo/MEMORY.md
head -n 6 "$store/memory/2026-11-09.md"
memctl --store "$store" search -k 3 "which database does Kestrel use"
memctl --store "$store" search -k 2 "店長"
memctl --store "$store" search --layered --workspace project:kestrel --budget 200 "which queue should the sync use"
set +x
echo "memctl is installed at $PWD/.venv/bin/memctl (cron runs with PATH=/usr/bin:/bin: use this path, README \"In cron\")"
