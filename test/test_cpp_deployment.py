"""C++ deployment, end to end: `cmake --install` the ops library into a temporary
prefix, configure and build examples/cpp against that *installed* package
(find_package(TorchConvTranspose), target TorchConvTranspose::ops), run its
TorchScript and AOTInductor apps, and compare their outputs with the same model
run eagerly in Python and with torch's own F.conv_transpose2d.

The library comes from the CMake build of the package (TCT_BUILD_DIR, else
build/main, as made by .ci/setup; brought up to date here), or, where there is
none, from a fresh build in a temporary folder. Everything is built once per
module (install prefix, example apps, models)."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

REPO = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "cpp"
JOBS = os.environ.get("MAX_JOBS", "2")

# torch 2.13 deprecates TorchScript, which LibTorch deployments still load.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script:DeprecationWarning")


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    """Runs cmd; a failure shows the command and all of its output."""
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)  # the apps must find their libraries by themselves
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env,
                          **kwargs)
    if proc.returncode != 0:
        pytest.fail(f"command failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n"
                    f"--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}",
                    pytrace=False)
    return proc


def generator_args() -> list:
    ninja = shutil.which("ninja") or shutil.which("ninja", path=os.path.dirname(sys.executable))
    return ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"] if ninja else []


def package_build_dir(tmp: pathlib.Path) -> pathlib.Path:
    """The package's CMake build folder, made up to date; a fresh one if there is none."""
    configured = pathlib.Path(os.environ.get("TCT_BUILD_DIR", REPO / "build" / "main"))
    if (configured / "CMakeCache.txt").exists():
        build = configured
    else:
        build = tmp / "build"
        run(["cmake", "-S", REPO, "-B", build, *generator_args(),
             f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
             "-DCMAKE_BUILD_TYPE=Release", "-DTCT_BUILD_TESTS=OFF"])
    run(["cmake", "--build", build, "--target", "tct_ops", "-j", JOBS])
    return build


@pytest.fixture(scope="module")
def prefix(tmp_path_factory) -> pathlib.Path:
    """The install prefix: lib/libtorch_convtranspose.so and the CMake package."""
    tmp = tmp_path_factory.mktemp("cpp_deploy")
    build = package_build_dir(tmp)
    prefix = tmp / "prefix"
    run(["cmake", "--install", build, "--prefix", prefix])
    return prefix


@pytest.fixture(scope="module")
def apps(prefix) -> pathlib.Path:
    """examples/cpp configured and built against the installed package."""
    build = prefix.parent / "examples"
    run(["cmake", "-S", EXAMPLES, "-B", build, *generator_args(),
         f"-DCMAKE_PREFIX_PATH={prefix};{torch.utils.cmake_prefix_path}",
         "-DCMAKE_BUILD_TYPE=Release",
         # Link as toolchains that default to --as-needed do (Ubuntu, Fedora): the
         # ops library, whose symbols the apps never name, must still be kept.
         "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed"])
    run(["cmake", "--build", build, "-j", JOBS])
    return build


def load_make_models():
    spec = importlib.util.spec_from_file_location("tct_make_models", EXAMPLES / "make_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """model.ts, model.pt2 and input.pt from examples/cpp/make_models.py, plus the
    Python results: the eager model and the torch-only reference."""
    mm = load_make_models()
    paths = mm.save_all(str(tmp_path_factory.mktemp("cpp_models")))
    model = mm.Upsample().eval()
    x = torch.load(paths["input.pt"])
    with torch.no_grad():
        eager = model(x)
        reference = torch.relu(F.conv_transpose2d(
            x, model.weight, model.bias, stride=2, padding=1, output_padding=1,
            groups=model.groups))
    assert eager.shape == (2, 6, 10, 14)
    return paths, eager, reference


def readelf_dynamic(path) -> str:
    return run(["readelf", "-d", path]).stdout


def test_installed_library(prefix):
    lib = prefix / "lib" / "libtorch_convtranspose.so"
    assert lib.is_file(), sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*"))
    dynamic = readelf_dynamic(lib)
    assert "RPATH" not in dynamic and "RUNPATH" not in dynamic, dynamic
    assert "Library soname: [libtorch_convtranspose.so]" in dynamic, dynamic
    cmake_dir = prefix / "lib" / "cmake" / "TorchConvTranspose"
    for name in ("TorchConvTransposeConfig.cmake", "TorchConvTransposeConfigVersion.cmake",
                 "TorchConvTransposeTargets.cmake"):
        assert (cmake_dir / name).is_file(), name


@pytest.mark.parametrize("app", ["run_torchscript", "run_aoti"])
def test_app_links_the_ops_library(apps, app):
    # Kept despite -Wl,--as-needed, and found through the app's own RUNPATH.
    assert "Shared library: [libtorch_convtranspose.so]" in readelf_dynamic(apps / app)


@pytest.mark.parametrize("app, model", [("run_torchscript", "model.ts"),
                                        ("run_aoti", "model.pt2")])
def test_app_output_matches_python(apps, models, app, model, tmp_path):
    paths, eager, reference = models
    out = tmp_path / "output.pt"
    proc = run([apps / app, paths[model], paths["input.pt"], out], cwd=tmp_path)
    assert "output: shape [2, 6, 10, 14]" in proc.stdout, proc.stdout
    got = torch.load(out)
    assert got.shape == eager.shape and got.dtype == torch.float32
    torch.testing.assert_close(got, eager, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-4)
    assert got.abs().sum() > 0  # not an all-zero output from the ReLU


def test_app_error_is_clear(apps, tmp_path):
    proc = subprocess.run([str(apps / "run_torchscript"), str(tmp_path / "missing.ts"),
                           str(tmp_path / "missing.pt")], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "run_torchscript:" in proc.stderr and "missing.ts" in proc.stderr, proc.stderr


def test_config_refuses_another_torch(prefix, tmp_path):
    # An install whose library was built against another torch (simulated by editing
    # the version its config records) must stop CMake with a clear message.
    other = tmp_path / "prefix"
    shutil.copytree(prefix, other, symlinks=True)
    config = other / "lib" / "cmake" / "TorchConvTranspose" / "TorchConvTransposeConfig.cmake"
    text = config.read_text()
    recorded = re.search(r'set\(TorchConvTranspose_TORCH_VERSION "([^"]+)"\)', text)
    assert recorded, text
    built = recorded.group(1)  # CMake's Torch_VERSION of the torch in use
    assert torch.__version__.startswith(built), (built, torch.__version__)
    config.write_text(text.replace(recorded.group(0),
                                   'set(TorchConvTranspose_TORCH_VERSION "1.0.0")'))
    proc = subprocess.run(
        ["cmake", "-S", str(EXAMPLES), "-B", str(tmp_path / "build"), *generator_args(),
         f"-DCMAKE_PREFIX_PATH={other};{torch.utils.cmake_prefix_path}"],
        capture_output=True, text=True)
    assert proc.returncode != 0
    message = " ".join(proc.stderr.split())
    assert f"was built against Torch 1.0.0, but CMake found Torch {built}" in message, message
