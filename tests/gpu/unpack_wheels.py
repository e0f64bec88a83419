"""Unpack wheels into a site-packages folder, for an interpreter that has no pip (standard library only).

python tests/gpu/unpack_wheels.py WHEELS SITE DIST...
Each DIST (and, for pytest, those of its requirements the interpreter cannot import) is unpacked from
the newest wheel in WHEELS whose tags this interpreter takes. A wheel is a zip of what pip would copy;
its .data folder holds nothing the check needs, so unpacking is installing here.
"""

from __future__ import annotations

import importlib.util
import platform
import sys
import zipfile
from pathlib import Path

# pytest's own requirements on Python 3.11 and later, with the module each provides
REQUIRES = {"pytest": {"iniconfig": "iniconfig", "packaging": "packaging", "pluggy": "pluggy",
                       "pygments": "pygments"}}


def accepted_tags() -> set[tuple[str, str]]:
    """(python tag, abi tag) pairs this CPython takes: pure wheels, its own ABI, and stable-ABI wheels."""
    minor = sys.version_info.minor
    tags = {("py3", "none"), (f"py3{minor}", "none"), (f"cp3{minor}", f"cp3{minor}")}
    tags |= {(f"cp3{m}", "abi3") for m in range(2, minor + 1)}
    return tags


def platform_fits(tag: str) -> bool:
    machine = platform.machine()
    return tag == "any" or any(t.startswith(("manylinux", "linux")) and t.endswith(machine) for t in tag.split("."))


def wheel_for(folder: Path, dist: str) -> Path:
    """The newest wheel of `dist` in `folder` that this interpreter can use; SystemExit if none."""
    fits = []
    for wheel in folder.glob(f"{dist}-*.whl"):
        parts = wheel.stem.split("-")
        if len(parts) < 5 or parts[0].lower() != dist:
            continue
        pythons, abi, plat = parts[-3], parts[-2], parts[-1]
        if any((py, abi) in accepted_tags() for py in pythons.split(".")) and platform_fits(plat):
            fits.append((tuple(int(p) for p in parts[1].split(".") if p.isdigit()), wheel))
    if not fits:
        raise SystemExit(f"no wheel of {dist} in {folder} fits Python {platform.python_version()} "
                         f"on {platform.machine()}")
    return max(fits)[1]


def main(argv: list[str]) -> int:
    folder, site, dists = Path(argv[0]), Path(argv[1]), list(argv[2:])
    for dist in list(dists):
        dists += [d for d, module in REQUIRES.get(dist, {}).items() if importlib.util.find_spec(module) is None]
    for dist in dict.fromkeys(dists):
        wheel = wheel_for(folder, dist)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
        print(f"unpacked {wheel} into {site}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
