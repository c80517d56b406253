"""Finding and checking libmlajit_torch.so, the C++ backend of torch.ops.mlajit.* (tools/python/csrc).

The library is C++ against one torch's ABI: it is loaded only when the torch.__version__ recorded in it at
build time (a marker string, read from the file without loading it) equals the running torch's. Looked for
at $MLAJIT_TORCH_LIBRARY, then next to the libmlajit.so the binding loaded (the same build folder, or the
installed package's lib/), then in the package's lib/ and a source tree's build folders.
"""
import os
import re
from pathlib import Path

from . import _lib as L

_MARKER = re.compile(rb"mlajit-torch-built-with=([^;\x00]{1,64});")
NAME = "libmlajit_torch.so"


def candidate_paths():
    out = []
    env = os.environ.get("MLAJIT_TORCH_LIBRARY")
    if env:
        out.append(env)
    try:
        loaded = L.library_path()
        if os.sep in loaded:
            out.append(str(Path(loaded).resolve().parent / NAME))
    except OSError:
        pass
    pkg = Path(__file__).resolve().parent
    out.append(str(pkg / "lib" / NAME))
    root = L._repo_root()
    if root is not None:
        for d in ("build", "build-gpu", "build-bench"):
            out.append(str(root / d / NAME))
    seen, unique = set(), []
    for p in out:
        if p not in seen:
            seen.add(p)
            unique.append(p)
    return unique


def built_with(path):
    """The torch version a libmlajit_torch.so was built against, read from the file (None if unmarked)."""
    with open(path, "rb") as f:
        m = _MARKER.search(f.read())
    return m.group(1).decode() if m else None


def find(torch_version):
    """(path, None) of a loadable library for this torch, or (None, why not) listing what was tried."""
    tried = []
    for p in candidate_paths():
        if not os.path.isfile(p):
            continue
        v = built_with(p)
        if v == torch_version:
            return p, None
        tried.append(f"{p}: built for torch {v}, this is torch {torch_version}" if v else f"{p}: no version marker")
    if not tried:
        return None, f"{NAME} not found (build it: cmake --build build --target mlajit_torch, with torch installed)"
    return None, "; ".join(tried)
