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
# Hand-written C shared by the Cython modules (CRC-32C, ...) and the vendored xxHash header (csrc/xxhash.h,
# BSD-2-Clause: csrc/LICENSE-xxhash); generated .c files sit beside the .pyx.
C_SOURCES = sorted(str(p.relative_to(HERE)) for p in CSRC.glob("*.c"))
# Headers and .pxd files every module may include: a change to one rebuilds, and an sdist carries them.
DEPENDS = sorted(str(p.relative_to(HERE)) for p in [*CSRC.glob("*.h"), *NATIVE.glob("*.pxd")])


def extensions():
    only = {n for n in os.environ.get("PYBROKER_ONLY", "").split(",") if n}
    exts = []
    for pyx in sorted(NATIVE.glob("*.pyx")):
        if only and pyx.stem not in only:
            continue
        exts.append(Extension(
            f"pybroker._native.{pyx.stem}",
            [str(pyx.relative_to(HERE))] + C_SOURCES,
            include_dirs=[str(NATIVE), str(CSRC)],
            depends=DEPENDS,
            extra_compile_args=["-O3", "-std=gnu11", "-Wno-unused-function"],
        ))
    return cythonize(exts, language_level=3, include_path=[str(NATIVE)], compiler_directives={
        "boundscheck": False, "wraparound": False, "cdivision": True, "embedsignature": True,
    })


setup(ext_modules=extensions())
