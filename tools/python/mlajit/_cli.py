"""The `mlajit-warmup` console script of the pip package: runs the mlajit-warmup executable shipped in the
package (mlajit/bin), or a source tree's build of it, with the same arguments and exit status."""
import os
import sys
from pathlib import Path

from . import _lib


def warmup_executable():
    """Path of the mlajit-warmup executable this package uses; raises FileNotFoundError naming the places."""
    tried = [Path(__file__).resolve().parent / "bin" / "mlajit-warmup"]
    root = _lib._repo_root()
    if root is not None:
        tried += [root / d / "mlajit-warmup" for d in ("build", "build-gpu", "build-bench")]
    for p in tried:
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    raise FileNotFoundError("mlajit-warmup not found; reinstall the package (pip install .) or build it "
                            "(cmake --build build --target mlajit-warmup). Tried: " + ", ".join(map(str, tried)))


def warmup_main():
    exe = warmup_executable()
    # NVRTC from the nvidia-cuda-nvrtc package when the executable is not the bundled one (which finds it
    # next to itself); an explicit MLAJIT_NVRTC_LIB wins.
    for var, path in _lib.nvidia_package_libraries().items():
        os.environ.setdefault(var, path)
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    warmup_main()
