"""How the extension is linked: what it exports, and that a C++ runtime linked into it
statically cannot mix with the process's own.

A toolchain that links libstdc++ statically (seen on a lent 16-core machine, gcc 13,
torch 2.11) put a second copy of the C++ runtime into the extension. Exported, its
symbols bound partly to the process's libstdc++.so.6: the locale's facet ids came from
one copy and the facets from the other, so that numbers vanished from our error
messages (here, gcc 12, `-DCMAKE_SHARED_LINKER_FLAGS=-static-libstdc++`) and formatting
them crashed there. CMakeLists.txt links the extension with --exclude-libs,ALL."""

import re
import shutil
import subprocess

import pytest
import torch

import torch_convtranspose._library as lib


def _exported() -> list:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run([nm, "-D", "--defined-only", "-C", lib.LIBRARY_PATH],
                         capture_output=True, text=True, check=True).stdout
    return [line.split(" ", 2)[-1] for line in out.splitlines() if line.strip()]


def test_nothing_from_static_archives_is_exported():
    names = _exported()
    # tct_core (a static archive): the problem checks and the kernel tables.
    core = [n for n in names if re.match(r"tct::(resolve_|conv_f32_table|isa_name)", n)]
    assert not core, f"tct_core symbols exported: {core[:5]}"
    # libstdc++'s own (never instantiated by our code): std::locale, the stream inserters.
    runtime = [n for n in names if n.startswith("std::locale") or "::_M_insert<" in n]
    assert not runtime, f"C++ runtime symbols exported: {runtime[:5]}"
    # The ops themselves still register at load time (not through exported names).
    assert hasattr(torch.ops.graph, "conv_transpose_backward_data")


def test_error_messages_carry_their_numbers():
    # check_consistent formats the shapes through std::ostringstream.
    dy, w = torch.zeros(1, 2, 5, 7), torch.zeros(2, 3, 3, 3)
    with pytest.raises(RuntimeError) as err:
        torch.ops.graph.conv_transpose_backward_data(
            dy, w, strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0], dilations=[1, 1],
            auto_pad="None", output_padding=[0, 0], groups=1, data_format="NCX",
            weights_format="OIX", src_shape=[1, 3, 9, 11])
    msg = str(err.value)
    assert "diff_dst spatial size [5, 7]" in msg, msg
    assert "src spatial size [9, 11]" in msg, msg
    assert "a forward pass gives 11 + output_padding in [0, 1) on axis 0" in msg, msg
