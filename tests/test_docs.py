"""Every shell example of README.md and docs/*.md runs on the demo store and prints what it shows.

An example's output is written by scripts/gen_docs.py (cog) and checked by
tests/test_cli.py::test_man_pages_and_completions_are_up_to_date; this test makes sure no example
escapes that: each shell block that runs memctl is generated or marked `<!-- not run: REASON -->`
(scripts/doc_examples.py lists them).
"""

from __future__ import annotations

import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import doc_examples  # noqa: E402  (scripts/ is not a package)


def test_every_shell_example_of_the_docs_is_generated_or_marked_not_run():
    examples = doc_examples.every_example()
    assert {e.file for e in examples} >= {"README.md", "docs/governance.md", "docs/state.md", "docs/topics.md"}
    missing = [f"{e.file}:{e.line}: {e.text.splitlines()[0]}" for e in examples if e.kind == "not generated"]
    assert not missing, ("examples whose output no run makes: put each in a cog block (scripts/gen_docs.py: "
                         "example, console, script) or mark it <!-- not run: REASON -->\n" + "\n".join(missing))
    assert all(e.reason for e in examples if e.kind == "not run")


def test_an_example_outside_cog_and_unmarked_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("""Text.

```sh
memctl search "which database"
```

<!-- not run: an install -->
```sh
pip install memctl && memctl --version
```

<!-- [[[cog
import cog
]]] -->
```console
$ echo hi | memctl ingest -
```
<!-- [[[end]]] -->

```
not a command: memctl's store layout
```

```python
memctl = "not shell"
```

<!-- not run: a marker with text after it marks nothing -->
Some text.

```sh
memctl index
```

```cron
0 * * * * $MEMCTL -q index
```
""")
    found = [(e.line, e.kind, e.reason) for e in doc_examples.examples(page)]
    assert found == [(3, "not generated", ""), (8, "not run", "an install"), (15, "generated", ""),
                     (31, "not generated", ""), (35, "not generated", "")]
