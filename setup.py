"""Build the native core: every native/*.pyx becomes pybroker._native.<name>.

PYBROKER_ONLY=a,b builds just those modules (handy while editing one of them).
"""
import os
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup

HERE = Path(__file__).parent
NATIVE = HERE / "native"
CSRC = NATIVE / "csrc"
# Hand-written C shared by the Cython modules (CRC-32C, ...); generated .c files sit beside the .pyx.
C_SOURCES = sorted(str(p.relative_to(HERE)) for p in CSRC.glob("*.c"))
# Modules that need a system header; each is built only where its header is found (pybroker.core
# then falls back to its pure twin, see core.OPTIONAL_NATIVE). Debian: apt-get install libxxhash-dev.
OPTIONAL_HEADERS = {"offset_map": "xxhash.h"}


def header_found(name):
    dirs = [d for var in ("CPATH", "C_INCLUDE_PATH") for d in os.environ.get(var, "").split(os.pathsep) if d]
    dirs += ["/usr/local/include", "/usr/include", "/opt/homebrew/include"]
    dirs += [str(p) for p in Path("/usr/include").glob("*-linux-gnu*")]
    return any((Path(d) / name).is_file() for d in dirs)


def extensions():
    only = {n for n in os.environ.get("PYBROKER_ONLY", "").split(",") if n}
    exts = []
    for pyx in sorted(NATIVE.glob("*.pyx")):
        if only and pyx.stem not in only:
            continue
        if pyx.stem in OPTIONAL_HEADERS and not header_found(OPTIONAL_HEADERS[pyx.stem]):
            print(f"pybroker: {OPTIONAL_HEADERS[pyx.stem]} not found, skipping the native {pyx.stem} "
                  "(its pure twin will be used)")
            continue
        exts.append(Extension(
            f"pybroker._native.{pyx.stem}",
            [str(pyx.relative_to(HERE))] + C_SOURCES,
            include_dirs=[str(NATIVE), str(CSRC)],
            extra_compile_args=["-O3", "-std=gnu11", "-Wno-unused-function"],
        ))
    return cythonize(exts, language_level=3, include_path=[str(NATIVE)], compiler_directives={
        "boundscheck": False, "wraparound": False, "cdivision": True, "embedsignature": True,
    })


setup(ext_modules=extensions())
