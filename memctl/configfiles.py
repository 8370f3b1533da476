"""An agent client's own config file (its MCP servers, its hooks): read it checked, write it back whole.

The file is the user's and holds their other settings: it is read and refused with one line
(file, line) when it is not what it should be, so nothing is written over a file a person is
halfway through editing; the new text replaces it atomically, with the old file kept beside it
(FILE.<time>.bak) and its permissions kept. `memctl mcp install` and `memctl hooks install` both
write through here.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from memctl import clock
from memctl.errors import InputError


def read_text(path: Path) -> str:
    """The file's text; "" when there is none yet."""
    return path.read_text(encoding="utf-8") if path.exists() else ""


def json_object(old: str, source: str, *, container: str) -> dict[str, Any]:
    """`old` parsed: a JSON object whose `container` key, if there, holds an object too ({} for an
    empty file). InputError naming the file and line otherwise; nothing is written then."""
    try:
        document = json.loads(old) if old.strip() else {}
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({exc.msg}); fix it first, nothing was written", source=source,
                         line=exc.lineno) from None
    if not isinstance(document, dict) or not isinstance(document.get(container, {}), dict):
        raise InputError(f"expected a JSON object whose \"{container}\" is an object; nothing was written",
                         source=source)
    return document


def json_text(document: Any) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def replace(path: Path, new: str) -> Path | None:
    """Write `new` as the file at `path`, atomically: the old file, if any, is kept beside it first
    (its name returned), and the new one gets its permissions (0600 for a new file: a client's
    config can hold keys)."""
    import shutil  # imported here: `memctl --help` loads the modules that import this one

    path.parent.mkdir(parents=True, exist_ok=True)
    mode = 0o600
    backup = None
    if path.exists():
        mode = path.stat().st_mode & 0o777
        stamp = clock.format_ts(clock.now()).replace(":", "").replace("-", "")
        backup = path.with_name(f"{path.name}.{stamp}.bak")
        count = 1
        while backup.exists():  # two installs in one second: the first backup is the one to keep
            count += 1
            backup = path.with_name(f"{path.name}.{stamp}-{count}.bak")
        shutil.copy2(path, backup)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(new)
    os.replace(partial, path)
    return backup


def memctl_argv(store: str, *args: str) -> list[str]:
    """How a client runs memctl on `store` (an absolute folder, or a URL): by absolute paths, since
    a client starts it with its own PATH and working directory. The install's console script when
    there is one, else this Python with -P -m (not the client's working directory first on the
    module path: a `memctl` folder there would run instead)."""
    script = Path(sys.executable).parent / ("memctl.exe" if sys.platform == "win32" else "memctl")
    store_args = ["--store", str(store), *args]
    if script.is_file():
        return [str(script), *store_args]
    return [sys.executable, "-P", "-m", "memctl", *store_args]
