"""Builds the extension with CMake (the one build description, CMakeLists.txt)
against the torch installed in this Python. Metadata is in pyproject.toml.

Install torch first (the version you will run with), then either
  pip install --no-build-isolation .       # an install (or `pip wheel ...` for a wheel)
  pip install --no-build-isolation -e .    # development: builds in build/main, in place
The wheel requires exactly the torch it was built against (torch==X.Y.Z).

Environment: TCT_BUILD_TESTS=ON builds the GoogleTest suites too (needs
GoogleTest; default OFF), TCT_BUILD_TYPE (default Release), MAX_JOBS (parallel
compile jobs, default all cores), TCT_BUILD_DIR (the CMake build folder of
in-place/editable builds, default build/main), TCT_CMAKE_ARGS (more arguments
for the CMake configure step, shell-quoted).
"""

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def _import_torch():
    try:
        import torch
        import torch.utils  # noqa: F401
    except ImportError as e:
        raise SystemExit(
            "torch_convtranspose: building needs torch installed in the Python that runs "
            f"the build ({sys.executable}), and the binary is tied to that torch version. "
            "Install torch first (e.g. `pip install torch==2.13.0 --index-url "
            "https://download.pytorch.org/whl/cpu`), then build with build isolation off: "
            f"`pip install --no-build-isolation .` (import error: {e})"
        ) from e
    return torch


def torch_requirement() -> str:
    """`torch==X.Y.Z` for the torch this build compiles against.

    The local version label (`+cpu`, `+cu126`) is dropped: PEP 440 matches
    `==2.13.0` against 2.13.0+cpu as well as the plain 2.13.0 of PyPI (same C++ ABI;
    this package runs on CPU), while `==2.13.0+cpu` would reject the latter."""
    torch = _import_torch()
    return "torch==" + torch.__version__.split("+", 1)[0]


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def run(self):
        # build_ext.run clears `inplace` before build_extension; remember it.
        self._develop = bool(self.inplace or getattr(self, "editable_mode", False))
        super().run()

    def build_extension(self, ext):
        torch = _import_torch()
        develop = getattr(self, "_develop", False)
        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        if develop:
            # Editable / in place: the library goes into the source package, so that
            # `cmake --build build/main` alone refreshes an editable install.
            target = os.path.join(ROOT, *ext.name.split(".")[:-1], os.path.basename(out))
            build_dir = os.environ.get("TCT_BUILD_DIR", os.path.join(ROOT, "build", "main"))
        else:
            # A wheel or a plain install: build beside setuptools' own temporary files,
            # never touching the source package or build/main.
            target = out
            build_dir = os.path.join(os.path.abspath(self.build_temp), "cmake")
        configure = [
            "cmake", "-S", ROOT, "-B", build_dir,
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
            f"-DTCT_OUTPUT_FILE={target}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('TCT_BUILD_TYPE', 'Release')}",
        ]
        tests = os.environ.get("TCT_BUILD_TESTS")
        if tests is not None:
            configure.append(f"-DTCT_BUILD_TESTS={tests}")
        elif not develop:
            configure.append("-DTCT_BUILD_TESTS=OFF")
        if not develop:
            # The packaged library must not point into this build's environment.
            configure.append("-DCMAKE_SKIP_BUILD_RPATH=ON")
        configure += shlex.split(os.environ.get("TCT_CMAKE_ARGS", ""))
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            ninja = self._find_ninja()
            if ninja:
                configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
        subprocess.check_call(configure)
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 1))
        build = ["cmake", "--build", build_dir, "-j", jobs]
        if not develop:
            build += ["--target", "tct_python_ext"]  # no benchmarks, no tests
        subprocess.check_call(build)
        if os.path.abspath(target) != out:
            os.makedirs(os.path.dirname(out), exist_ok=True)
            shutil.copyfile(target, out)

    @staticmethod
    def _find_ninja():
        from shutil import which

        beside_python = os.path.join(os.path.dirname(sys.executable), "ninja")
        return which("ninja") or (beside_python if os.path.exists(beside_python) else None)


setup(
    ext_modules=[CMakeExtension("torch_convtranspose._C")],
    cmdclass={"build_ext": CMakeBuild},
    install_requires=[torch_requirement()],
)
