"""docs/api.md's example runs as written, against a fresh store, with the real index and model."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO


def example_code() -> str:
    doc = (REPO / "docs" / "api.md").read_text()
    section = doc.split("\n## Example\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "docs/api.md: no ```python block under '## Example'"
    return match.group(1)


@pytest.mark.process
def test_api_example_runs(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCTL_")}
    done = subprocess.run([sys.executable, "-c", example_code()], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert '"section": "Decisions"' in lines[0] and "PostgreSQL" in lines[0]
    assert "'deprecated'" in lines[1] and "'active'" in lines[1]
    assert lines[3] == "['Decisions']"
    memory_md = (tmp_path / "demo-store" / "MEMORY.md").read_text()
    assert "PostgreSQL" in memory_md and "CockroachDB" in memory_md and "Mei's demo" in memory_md
