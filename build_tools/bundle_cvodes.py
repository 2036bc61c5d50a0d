"""Build SUNDIALS' CVODES into the package at install (#57): no system library, no apt step.

SUNDIALS' source is not ours to commit. The package registry has it: AMICI's source
distribution on PyPI bundles SUNDIALS (BSD-3-Clause). At install this script fetches that
archive (pinned by version and SHA-256), takes the C files CVODES needs (the core, CVODES,
the serial vector, the dense, band and sparse matrices, the dense and band linear solvers,
the Newton and fixed-point nonlinear solvers, and the KLU sparse linear solver with the parts
of SuiteSparse it needs: AMD, COLAMD, BTF, KLU, the same archive's copy), writes the two
configuration headers SUNDIALS' CMake would generate, and compiles them, optimised, into one
static library:

    sklode/_sundials/include/...          SUNDIALS' headers
    sklode/_sundials/lib/libsklode_sundials.a
    sklode/_sundials/VERSION              "7.1.1 with KLU from amici-1.0.1.tar.gz"
    sklode/_sundials/*_LICENSE            SUNDIALS' (BSD-3) and SuiteSparse's licences
                                          (AMD, COLAMD: BSD-3; BTF, KLU: LGPL-2.1+, built
                                          here from their source)

and then, against it, the solver every model uses with no compiler at run time (sklode's
CVODES driver with the interpreter of a model's instructions, sklode/models/_tape_model.c):

    sklode/_sundials/lib/libsklode_tape.so    (.dylib on macOS, sklode_tape.dll on Windows)

``sklode.models._native`` looks there first (``SUNDIALS_DIR`` set by the user wins). Where the
archive cannot be had (no network to the registry) or no C compiler exists, the install goes
on without it, and ``integrator="auto"`` says why once per process.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

SOURCE = "amici"
VERSION = "1.0.1"
ARCHIVE = f"{SOURCE}-{VERSION}.tar.gz"
SHA256 = "50c8ac8346503bbdb2ff75876ac987dc74cf680a05e14faf73a383e1e2b2152a"
SUNDIALS_VERSION = (7, 1, 1)
_ROOT = f"{SOURCE}-{VERSION}/amici/_installation/ThirdParty/sundials/"
# the parts of SUNDIALS the driver uses (directories under src/)
_PARTS = ("sundials", "cvodes", "nvector/serial", "sunmatrix/dense", "sunmatrix/band",
          "sunmatrix/sparse", "sunlinsol/dense", "sunlinsol/band", "sunnonlinsol/newton",
          "sunnonlinsol/fixedpoint", "sunmemory/system", "sunlinsol/klu")
_SUITESPARSE_ROOT = f"{SOURCE}-{VERSION}/amici/_installation/ThirdParty/SuiteSparse/"
# KLU (a sparse LU for circuit-like matrices: what a reaction network's Jacobian is) and the
# orderings it uses; each folder's Source/*.c and Include/*.h (SuiteSparse_config: its two
# files)
_SUITESPARSE_PARTS = ("SuiteSparse_config", "AMD", "COLAMD", "BTF", "KLU")
LIBRARY = "sklode_sundials"


def _index_url():
    """The package index pip would use (``PIP_INDEX_URL``), as a simple-API root."""
    return os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")


def fetch_archive(cache):
    """The source archive's bytes: from ``cache`` if there, else from the package index
    (its simple API names the file's address), checked against :data:`SHA256`."""
    cached = Path(cache) / ARCHIVE
    if cached.is_file():
        data = cached.read_bytes()
        if hashlib.sha256(data).hexdigest() == SHA256:
            return data
    page = urllib.request.urlopen(f"{_index_url()}/{SOURCE}/", timeout=60).read().decode()
    links = re.findall(r'href="([^"]*' + re.escape(ARCHIVE) + r'[^"]*)"', page)
    if not links:
        raise RuntimeError(f"the index {_index_url()} lists no {ARCHIVE}")
    url = urllib.request.urljoin(f"{_index_url()}/{SOURCE}/", links[0].split("#")[0])
    data = urllib.request.urlopen(url, timeout=120).read()
    if hashlib.sha256(data).hexdigest() != SHA256:
        raise RuntimeError(f"{ARCHIVE} from {url} does not have the expected SHA-256")
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_bytes(data)
    except OSError:
        pass  # a read-only cache only costs the next download
    return data


def _extract(data, into):
    """SUNDIALS' include/ and the source folders of :data:`_PARTS`, and its licence, into
    ``into``; SuiteSparse's parts (:data:`_SUITESPARSE_PARTS`) and licences into
    ``into/SuiteSparse``."""
    wanted = [_ROOT + "include/", _ROOT + "LICENSE", _ROOT + "NOTICE"] + [
        f"{_ROOT}src/{part}/" for part in _PARTS]
    suitesparse = [f"{_SUITESPARSE_ROOT}{part}/{folder}" for part in _SUITESPARSE_PARTS
                   for folder in ("Source/", "Include/", "Doc/License.txt",
                                  "SuiteSparse_config.")]
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            if not member.isfile():
                continue
            if any(member.name.startswith(w) for w in wanted):
                target = Path(into) / member.name[len(_ROOT):]
            elif any(member.name.startswith(w) for w in suitesparse):
                target = Path(into) / "SuiteSparse" / member.name[len(_SUITESPARSE_ROOT):]
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.extractfile(member).read())


def _config_headers(include):
    """``sundials_config.h`` and ``sundials_export.h`` as SUNDIALS' CMake would write them
    for this build: double precision, 64-bit indices, no MPI or third-party libraries."""
    major, minor, patch = SUNDIALS_VERSION
    windows = sys.platform == "win32"
    visible = "" if windows else '__attribute__((visibility("default")))'
    (include / "sundials" / "sundials_export.h").write_text(
        "#ifndef SUNDIALS_EXPORT_H\n#define SUNDIALS_EXPORT_H\n"
        f"#define SUNDIALS_EXPORT {visible}\n#define SUNDIALS_NO_EXPORT\n"
        "#define SUNDIALS_DEPRECATED\n#define SUNDIALS_DEPRECATED_EXPORT SUNDIALS_EXPORT\n"
        "#define SUNDIALS_DEPRECATED_NO_EXPORT\n#endif\n")
    text = [
        "#ifndef _SUNDIALS_CONFIG_H", "#define _SUNDIALS_CONFIG_H",
        '#include "sundials/sundials_export.h"',
        "#define SUNDIALS_NOEXCEPT",
        "#define SUNDIALS_DEPRECATED_MSG(msg)",
        "#define SUNDIALS_DEPRECATED_EXPORT_MSG(msg) SUNDIALS_EXPORT",
        "#define SUNDIALS_DEPRECATED_NO_EXPORT_MSG(msg)",
        f'#define SUNDIALS_VERSION "{major}.{minor}.{patch}"',
        f"#define SUNDIALS_VERSION_MAJOR {major}", f"#define SUNDIALS_VERSION_MINOR {minor}",
        f"#define SUNDIALS_VERSION_PATCH {patch}", '#define SUNDIALS_VERSION_LABEL ""',
        '#define SUNDIALS_GIT_VERSION ""',
        "#define SUNDIALS_DOUBLE_PRECISION 1", "#define SUNDIALS_INT64_T 1",
        "#define SUNDIALS_INDEX_TYPE int64_t", "#define SUNDIALS_LOGGING_LEVEL 0",
        "#define SUNDIALS_MPI_ENABLED 0",
        "" if windows else "#define SUNDIALS_HAVE_POSIX_TIMERS",
        "#define SUNDIALS_CVODES 1",
    ]
    for name in ("SUN_C_COMPILER", "SUN_C_COMPILER_VERSION", "SUN_C_COMPILER_FLAGS",
                 "SUN_CXX_COMPILER", "SUN_CXX_COMPILER_VERSION", "SUN_CXX_COMPILER_FLAGS",
                 "SUN_FORTRAN_COMPILER", "SUN_FORTRAN_COMPILER_VERSION",
                 "SUN_FORTRAN_COMPILER_FLAGS", "SUN_JOB_ID", "SUN_JOB_START_TIME",
                 "SUN_TPL_LIST", "SUN_TPL_LIST_SIZE", "SUNDIALS_SPACK_VERSION"):
        text.append(f'#define {name} ""')
    text += ['#define SUN_BUILD_TYPE "Release"', "#endif"]
    (include / "sundials" / "sundials_config.h").write_text("\n".join(text) + "\n")


def bundle(target, *, cache=None, verbose=True):
    """Build the static CVODES library into ``target`` (a ``sklode/_sundials`` folder),
    then the solver for every model against it (:func:`build_tape_solver`).

    Parameters
    ----------
    target : path
        Where ``include/``, ``lib/`` and ``VERSION`` go.
    cache : path, optional
        Where the source archive is kept between builds (default: the user's cache).
    verbose : bool, default=True

    Returns
    -------
    bool
        Whether the library is there (built now or before).
    """
    target = Path(target)
    stamp = f"{'.'.join(map(str, SUNDIALS_VERSION))} with KLU from {ARCHIVE}\n"
    if not ((target / "VERSION").is_file() and (target / "VERSION").read_text() == stamp):
        _build_sundials(target, stamp, cache, verbose)
    build_tape_solver(target, verbose=verbose)
    return True


def _compiler():
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.sysconfig import customize_compiler

    compiler = new_compiler()
    customize_compiler(compiler)
    flags = ["/O2"] if compiler.compiler_type == "msvc" else ["-O2", "-fPIC", "-std=c99"]
    return compiler, flags


def tape_library_name():
    if sys.platform == "win32":
        return "sklode_tape.dll"
    return "libsklode_tape.dylib" if sys.platform == "darwin" else "libsklode_tape.so"


def build_tape_solver(target, *, verbose=True):
    """Compile sklode's CVODES driver with the instruction interpreter
    (``sklode/models/_tape_model.c``) into ``target/lib``, linked with the static CVODES
    library there; again only when those sources changed (a stamp holds their hash)."""
    target = Path(target)
    models = Path(__file__).resolve().parents[1] / "sklode" / "models"
    sources = [models / "_tape_model.c", models / "_cvodes_driver.c"]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()
    library = target / "lib" / tape_library_name()
    stamp = target / "lib" / "tape.sha256"
    if library.is_file() and stamp.is_file() and stamp.read_text() == digest:
        return library
    compiler, flags = _compiler()
    with tempfile.TemporaryDirectory() as tmp:
        objects = compiler.compile([str(sources[0])], output_dir=tmp,
                                   include_dirs=[str(target / "include"), str(models)],
                                   macros=[("SKLODE_TAPE_SOURCE", f'"{digest}"'),
                                           ("SKLODE_HAVE_KLU", "1")],
                                   extra_postargs=flags)
        built = Path(tmp) / library.name
        compiler.link_shared_object(objects, str(built), libraries=[LIBRARY],
                                    library_dirs=[str(target / "lib")],
                                    extra_postargs=[] if compiler.compiler_type == "msvc"
                                    else ["-lm"])
        shutil.copy(built, library)
    stamp.write_text(digest)
    if verbose:
        print(f"sklode: the CVODES solver for every model built into {library}",
              file=sys.stderr)
    return library


def _build_sundials(target, stamp, cache, verbose):
    cache = cache or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sklode"
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "sundials"
        _extract(fetch_archive(cache), source)
        _config_headers(source / "include")
        compiler, flags = _compiler()
        suitesparse = source / "SuiteSparse"
        # SuiteSparse's headers go beside SUNDIALS' (sunlinsol_klu.h includes klu.h)
        for part in _SUITESPARSE_PARTS:
            for header in (suitesparse / part).glob("**/*.h"):
                shutil.copy(header, source / "include" / header.name)
        sources = sorted(str(p) for part in _PARTS for p in (source / "src" / part).glob("*.c"))
        objects = compiler.compile(
            sources, output_dir=str(Path(tmp) / "obj"),
            include_dirs=[str(source / "include"), str(source / "src" / "sundials")],
            macros=[("_POSIX_C_SOURCE", "200112L")], extra_postargs=flags)
        # SuiteSparse is written for C11 (stdbool, // comments), not c99
        ss_sources = sorted(str(p) for part in _SUITESPARSE_PARTS
                            for p in [*(suitesparse / part).glob("Source/*.c"),
                                      *(suitesparse / part).glob("*.c")])
        objects += compiler.compile(
            ss_sources, output_dir=str(Path(tmp) / "obj_suitesparse"),
            include_dirs=[str(source / "include")],
            macros=[("NDEBUG", None)],
            extra_postargs=[f for f in flags if f != "-std=c99"])
        staged = Path(tmp) / "staged"
        compiler.create_static_lib(objects, LIBRARY, output_dir=str(staged / "lib"))
        shutil.copytree(source / "include", staged / "include")
        for name in ("LICENSE", "NOTICE"):
            shutil.copy(source / name, staged / f"SUNDIALS_{name}")
        for part in _SUITESPARSE_PARTS[1:]:
            shutil.copy(suitesparse / part / "Doc" / "License.txt",
                        staged / f"SUITESPARSE_{part}_LICENSE")
        (staged / "VERSION").write_text(stamp)
        if target.exists():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staged, target)
    if verbose:
        print(f"sklode: SUNDIALS {stamp.strip()} built into {target}", file=sys.stderr)


if __name__ == "__main__":  # python build_tools/bundle_cvodes.py sklode/_sundials
    bundle(sys.argv[1] if len(sys.argv) > 1 else "sklode/_sundials")
