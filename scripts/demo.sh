#!/usr/bin/env bash
# Install memctl, then run its main job on the bundled example: ingest a
# three-session chat and a MEMORY.md into a fresh store and show what it holds.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PATH="$PWD/.venv/bin:$PATH"
store=$(mktemp -d)/memory
set -x
memctl --store "$store" ingest fixtures/demo/chat.jsonl
memctl --store "$store" ingest fixtures/demo/MEMORY.md
head -n 12 "$store/memory/2026-11-09.md"
sed -n '/## 待辦/,$p' "$store/MEMORY.md"
