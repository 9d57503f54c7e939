"""The wheel: `pip wheel --no-build-isolation --no-deps .` with GoogleTest made
unfindable, installed by pip into a fresh virtual environment, then used from
a temporary folder (so the package must come from the wheel, not from the
source tree) against torch's own F.conv_transpose2d.

The fresh environment reuses this interpreter's torch through a .pth line
(this interpreter may itself be a venv, whose packages --system-site-packages
would not reach); pip resolves the wheel's torch==X.Y.Z pin against it with
--no-index, so a pin pip cannot match fails here instead of downloading a torch.
Built once per module."""

from __future__ import annotations

import email.parser
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import zipfile

import pytest
import torch

REPO = pathlib.Path(__file__).resolve().parent.parent


def source_version() -> str:
    text = (REPO / "torch_convtranspose" / "_version.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, re.M).group(1)


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "TCT_BUILD_TESTS",
                        "TCT_BUILD_DIR", "PIP_REQUIRE_VIRTUALENV")}
    env.update(extra)
    return env


def run(cmd, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        pytest.fail(f"command failed (exit {proc.returncode}): {' '.join(map(str, cmd))}\n"
                    f"--- stdout\n{proc.stdout[-6000:]}\n--- stderr\n{proc.stderr[-6000:]}",
                    pytrace=False)
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("wheelhouse")
    env = clean_env(
        MAX_JOBS=os.environ.get("MAX_JOBS", "2"),
        # A machine without GoogleTest: find_package(GTest) must not even be reached.
        TCT_CMAKE_ARGS="-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON")
    run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
         "--no-cache-dir", "-w", out, REPO], cwd=out, env=env)
    wheels = list(out.glob("torch_convtranspose-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> pathlib.Path:
    """A fresh venv with the wheel installed by pip (torch reused, see the module doc)."""
    root = tmp_path_factory.mktemp("venv") / "env"
    # No pip/setuptools of its own: those of this interpreter come with the .pth line
    # (a bundled old setuptools would shadow the one torch requires).
    run([sys.executable, "-m", "venv", "--without-pip", root])
    python = root / "bin" / "python"
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                  env=clean_env()).stdout.strip()
    torch_site = pathlib.Path(torch.__file__).resolve().parent.parent
    (pathlib.Path(purelib) / "_reuse_torch.pth").write_text(f"{torch_site}\n")
    run([python, "-m", "pip", "install", "--no-index", "--no-cache-dir",
         "--disable-pip-version-check", wheel], cwd=root, env=clean_env())
    return root


def wheel_metadata(wheel: pathlib.Path):
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(z.read(name).decode())


def test_wheel_metadata_pins_the_build_torch(wheel):
    meta = wheel_metadata(wheel)
    assert meta["Name"] == "torch_convtranspose"
    assert meta["Version"] == source_version()
    requires = meta.get_all("Requires-Dist")
    torch_pins = [r for r in requires if r.replace(" ", "").startswith("torch") and
                  "extra" not in r]
    public = torch.__version__.split("+", 1)[0]
    assert torch_pins == [f"torch=={public}"], requires
    assert meta["License-Expression"] == "MIT"
    assert {'onnx; extra == "onnx"', 'onnxruntime; extra == "onnx"'} <= set(requires)


def test_wheel_holds_the_extension_without_build_paths(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        libs = [n for n in names if re.fullmatch(r"torch_convtranspose/_C[^/]*\.so", n)]
        assert len(libs) == 1, names
        assert "torch_convtranspose/_version.py" in names
        assert not [n for n in names if n.startswith(("test/", "csrc/", "build/"))], names
        z.extract(libs[0], tmp_path)
    dynamic = run(["readelf", "-d", tmp_path / libs[0]]).stdout
    assert "RPATH" not in dynamic and "RUNPATH" not in dynamic, dynamic


CHECK = textwrap.dedent("""
    import json, torch, torch.nn.functional as F
    import torch_convtranspose as tct
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 5, 7, generator=g)
    w = torch.randn(6, 2, 3, 4, generator=g)   # IOX, groups=3: OC = 6
    b = torch.randn(6, generator=g)
    y = torch.ops.graph.conv_transpose(
        x, w, b, strides=[2, 1], pads_begin=[1, 2], pads_end=[1, 2], dilations=[1, 2],
        output_padding=[1, 0], groups=3, data_format="NCX", weights_format="IOX")
    ref = F.conv_transpose2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2),
                             output_padding=(1, 0), groups=3)
    print(json.dumps({"file": tct.__file__, "library": tct._library.LIBRARY_PATH,
                      "version": tct.__version__, "shape": list(y.shape),
                      "ref_shape": list(ref.shape),
                      "max_err": (y - ref).abs().max().item(),
                      "max_ref": ref.abs().max().item()}))
""")


def test_installed_wheel_works_from_elsewhere(venv, tmp_path):
    python = venv / "bin" / "python"
    proc = run([python, "-c", CHECK], cwd=tmp_path, env=clean_env())
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    site = venv.resolve()
    assert pathlib.Path(got["file"]).resolve().is_relative_to(site), got
    assert pathlib.Path(got["library"]).resolve().is_relative_to(site), got
    assert got["version"] == source_version()
    assert got["shape"] == got["ref_shape"] == [2, 6, 10, 9]
    assert got["max_err"] <= 1e-4 * max(1.0, got["max_ref"]), got


def test_pip_check_is_satisfied(venv):
    # The pin torch==X.Y.Z is met by this (possibly +cpu) torch, per pip itself.
    proc = run([venv / "bin" / "python", "-m", "pip", "check", "--disable-pip-version-check"],
               env=clean_env())
    assert "No broken requirements found" in proc.stdout, proc.stdout
