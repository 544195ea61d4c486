"""`python upstream_reference_runner.py DEPS ROOT SCRIPT ARGS...`: runs SCRIPT as `python SCRIPT ARGS...`
would, then writes to DEPS (JSON) the files below ROOT (the repo) it imported, relative to ROOT, which
upstream_reference.py keys its cache entry on."""

import json
import os
import runpy
import sys
from pathlib import Path


def _imported_files(root: Path) -> list[str]:
    files = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and Path(path).resolve().is_relative_to(root):
            files.add(str(Path(path).resolve().relative_to(root)))
    return sorted(files)


def main() -> int:
    deps, root, script = sys.argv[1], Path(sys.argv[2]).resolve(), sys.argv[3]
    sys.argv = sys.argv[3:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    code: object = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = e.code
    if code not in (0, None):
        return code if isinstance(code, int) else 1
    Path(deps).write_text(json.dumps(_imported_files(root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
