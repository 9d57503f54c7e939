"""Builds the extension with CMake (the one build description, CMakeLists.txt)
against the installed torch. Install torch==2.13.0 first, then
`pip install --no-build-isolation -e .` (see README)."""

import os
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        import torch.utils  # the torch this package is built against

        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        # CMake always writes the library into the source package, so that
        # `cmake --build build/main` alone refreshes an editable install.
        in_source = os.path.join(ROOT, *ext.name.split(".")[:-1], os.path.basename(out))
        build_dir = os.environ.get("TCT_BUILD_DIR", os.path.join(ROOT, "build", "main"))
        configure = [
            "cmake", "-S", ROOT, "-B", build_dir,
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
            f"-DTCT_OUTPUT_FILE={in_source}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('TCT_BUILD_TYPE', 'Release')}",
            f"-DTCT_BUILD_TESTS={os.environ.get('TCT_BUILD_TESTS', 'ON')}",
        ]
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            ninja = self._find_ninja()
            if ninja:
                configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
        subprocess.check_call(configure)
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 1))
        subprocess.check_call(["cmake", "--build", build_dir, "-j", jobs])
        if os.path.abspath(in_source) != out:
            os.makedirs(os.path.dirname(out), exist_ok=True)
            shutil.copyfile(in_source, out)

    @staticmethod
    def _find_ninja():
        from shutil import which

        beside_python = os.path.join(os.path.dirname(sys.executable), "ninja")
        return which("ninja") or (beside_python if os.path.exists(beside_python) else None)


setup(
    name="torch_convtranspose",
    version="0.1.0",
    description="oneDNN Graph ConvTranspose ops for PyTorch on CPU",
    packages=find_packages(include=["torch_convtranspose", "torch_convtranspose.*"]),
    ext_modules=[CMakeExtension("torch_convtranspose._C")],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    install_requires=["torch"],
    zip_safe=False,
)
