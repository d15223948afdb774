"""Lab hosts only: keep the bytecode of modules that Python imports from zip files.

Ansible sends each task's module as a zip, and Python compiles every source it imports from a
zip again on each run: about a third of a task's CPU on a lab host, where CPU is what the
scenarios wait for. The lab image loads this from a .pth file. The code objects are the ones
Python would compile, keyed by their source and the interpreter's bytecode version, and carry
the file name of the zip at hand.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import types
import zipimport
from pathlib import Path

CACHE_DIR = Path(os.environ.get("ZIP_BYTECODE_CACHE_DIR", "/var/cache/zip-bytecode"))
_compile_source = zipimport._compile_source  # type: ignore[attr-defined]


def _with_filename(code: types.CodeType, filename: str) -> types.CodeType:
    consts = tuple(
        _with_filename(const, filename) if isinstance(const, types.CodeType) else const
        for const in code.co_consts
    )
    return code.replace(co_filename=filename, co_consts=consts)


def cached_compile_source(pathname: str, source: bytes) -> types.CodeType:
    entry = CACHE_DIR / hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest()
    try:
        with entry.open("rb") as cached:
            code = marshal.load(cached)
        if isinstance(code, types.CodeType):
            return _with_filename(code, pathname)
    except (OSError, EOFError, ValueError, TypeError):
        pass  # not cached yet, or an unreadable entry: compile it again
    compiled: types.CodeType = _compile_source(pathname, source)
    try:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        partial = entry.with_name(f"{entry.name}.{os.getpid()}")
        with partial.open("wb") as out:
            marshal.dump(compiled, out)
        partial.replace(entry)
    except OSError:
        pass  # a read-only or full disk costs the cache, never the import
    return compiled


zipimport._compile_source = cached_compile_source  # type: ignore[attr-defined]
