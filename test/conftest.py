import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import problems as P  # noqa: E402


@pytest.fixture
def tct():
    """The package under test (an import failure fails the test)."""
    return P.tct()


@pytest.fixture(params=P.isa_param_names())
def isa(request):
    """Each available kernel ISA in turn; the previous ISA is restored afterwards."""
    P.require_isa(request.param)
    with P.use_isa(request.param):
        yield request.param
