"""Which files kernel-builder's Nix build takes from a kernel tree, modelled here to compare with tools/bundle.

nix-builder/lib/source-set.nix: the build's source is build.toml plus every file under torch-ext/
and tests/ whose name ends in `.<ext>` for an `ext` in `[torch-noarch] pyext` (default `py`,
`pyi`; lib.fileset's `hasExt`). The noarch setup.py template then copies every file of the source
under torch-ext/<name>/ (bytecode left out) into the variant, beside the generated `_ops.py` and
`metadata.json`. `kernel-builder create-pyproject` refuses to overwrite the files it generates.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_PYEXT = ("py", "pyi")


def module_name(build_toml: dict) -> str:
    """The package's directory under torch-ext/."""
    return build_toml["general"]["name"].replace("-", "_")


def pyext(build_toml: dict) -> tuple[str, ...]:
    """The extensions the source set keeps, as kernel-builder reads them from build.toml."""
    ext_config = build_toml.get("torch") or build_toml.get("torch-noarch") or build_toml.get("tvm-ffi") or {}
    return tuple(ext_config.get("pyext", DEFAULT_PYEXT))


def source_files(tree: Iterable[str], build_toml: dict) -> set[str]:
    """The files of `tree` (paths relative to the kernel root) that the source set selects."""
    extensions = pyext(build_toml)
    keep = {"build.toml"} & set(tree)
    for path in tree:
        name = path.rsplit("/", 1)[-1]
        if path.startswith(("torch-ext/", "tests/")) and any(name.endswith(f".{ext}") for ext in extensions):
            keep.add(path)
    return keep


def variant_files(tree: Iterable[str], build_toml: dict) -> set[str]:
    """The files of the noarch variant kernel-builder builds from `tree`, relative to the variant."""
    prefix = f"torch-ext/{module_name(build_toml)}/"
    copied = {
        path.removeprefix(prefix)
        for path in source_files(tree, build_toml)
        if path.startswith(prefix) and not path.endswith(".pyc") and "__pycache__" not in path.split("/")
    }
    return copied | {"_ops.py", "metadata.json"}


def generated_by_kernel_builder(path: str, build_toml: dict) -> bool:
    """Whether `kernel-builder create-pyproject` writes `path` into the source of a noarch kernel.

    It writes pyproject.toml, setup.py, torch-ext/<name>/_ops.py and metadata-<backend>.json for
    every backend it knows.
    """
    return (path in ("pyproject.toml", "setup.py", f"torch-ext/{module_name(build_toml)}/_ops.py")
            or ("/" not in path and path.startswith("metadata-") and path.endswith(".json")))
