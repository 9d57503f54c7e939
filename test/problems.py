"""Shared test material: layout helpers, auto_pad resolution, the plain-PyTorch
oracle of SPEC section 7, and sample problems.

Everything here is written from /work/shared/SPEC.md only; it does not import
or mirror the implementation under test (torch_convtranspose).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import pathlib
import random
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------
# Locations
# --------------------------------------------------------------------------

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def shared_dir() -> pathlib.Path:
    """The shared/ folder (TCT_SHARED_DIR, default: ../shared beside the repo)."""
    env = os.environ.get("TCT_SHARED_DIR")
    return pathlib.Path(env) if env else (REPO_ROOT.parent / "shared")


# --------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------

DATA_FORMATS = ("NXC", "NCX")
WEIGHTS_FORMATS = ("IOX", "XOI", "OIX", "XIO")
AUTO_PADS = ("None", "SAME_UPPER", "SAME_LOWER", "VALID")
KNOWN_ISAS = ("reference", "avx2", "avx512", "avx512_bf16", "avx512_amx")
# The uarch under which use_isa runs avx512_bf16 on a CPU whose own rule keeps
# bf16 off the VDPBF16PS tiles (Intel: half rate there), so that they run.
BF16_TILES_UARCH = "zen4"


def mixed_case(s: str, rng: random.Random) -> str:
    """A random letter-case spelling of s (auto_pad is case-insensitive)."""
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in s)


# --------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------


def _data_perm_from_ncx(fmt: str, S: int) -> list[int]:
    """Permutation p with nxc = ncx.permute(p) (for fmt 'NXC'), identity for NCX."""
    fmt = fmt.upper()
    if fmt == "NCX":
        return list(range(S + 2))
    if fmt == "NXC":
        return [0] + list(range(2, S + 2)) + [1]
    raise ValueError(fmt)


def _inverse(p: Sequence[int]) -> list[int]:
    inv = [0] * len(p)
    for i, v in enumerate(p):
        inv[v] = i
    return inv


def data_from_ncx(t: torch.Tensor, fmt: str) -> torch.Tensor:
    return t.permute(_data_perm_from_ncx(fmt, t.dim() - 2))


def data_to_ncx(t: torch.Tensor, fmt: str) -> torch.Tensor:
    return t.permute(_inverse(_data_perm_from_ncx(fmt, t.dim() - 2)))


def data_shape_from_ncx(shape: Sequence[int], fmt: str) -> list[int]:
    p = _data_perm_from_ncx(fmt, len(shape) - 2)
    return [int(shape[i]) for i in p]


def data_shape_to_ncx(shape: Sequence[int], fmt: str) -> list[int]:
    p = _inverse(_data_perm_from_ncx(fmt, len(shape) - 2))
    return [int(shape[i]) for i in p]


def _weights_perm_from_iox(fmt: str, S: int) -> list[int]:
    """Permutation p with w_fmt = w_iox.permute(p). IOX axes: I=0, O=1, X=2..S+1."""
    pos = {"I": [0], "O": [1], "X": list(range(2, S + 2))}
    fmt = fmt.upper()
    if sorted(fmt) != ["I", "O", "X"]:
        raise ValueError(fmt)
    return [a for letter in fmt for a in pos[letter]]


def weights_from_iox(w: torch.Tensor, fmt: str) -> torch.Tensor:
    return w.permute(_weights_perm_from_iox(fmt, w.dim() - 2))


def weights_to_iox(w: torch.Tensor, fmt: str) -> torch.Tensor:
    return w.permute(_inverse(_weights_perm_from_iox(fmt, w.dim() - 2)))


def weights_shape_from_iox(shape: Sequence[int], fmt: str) -> list[int]:
    p = _weights_perm_from_iox(fmt, len(shape) - 2)
    return [int(shape[i]) for i in p]


def weights_shape_to_iox(shape: Sequence[int], fmt: str) -> list[int]:
    p = _inverse(_weights_perm_from_iox(fmt, len(shape) - 2))
    return [int(shape[i]) for i in p]


# --------------------------------------------------------------------------
# Arithmetic (SPEC section 3)
# --------------------------------------------------------------------------


def eff_kernel(k: int, d: int) -> int:
    return d * (k - 1) + 1


def forward_size(i: int, k: int, s: int, d: int, pb: int, pe: int, op: int) -> int:
    return s * (i - 1) + eff_kernel(k, d) + op - pb - pe


def backward_data_default_size(D: int, k: int, s: int, d: int, pb: int, pe: int) -> int:
    return (D + pb + pe - eff_kernel(k, d)) // s + 1


def resolve_pads(auto_pad: str, sizes, kernel, strides, dilations, pads_begin, pads_end,
                 direction: str):
    """Explicit (pads_begin, pads_end) after auto_pad.

    direction 'fwd': sizes are src sizes;  'bwd': sizes are diff_dst sizes (D).
    """
    mode = auto_pad.upper()
    S = len(kernel)
    if mode == "NONE":
        return list(pads_begin), list(pads_end)
    if mode == "VALID":
        return [0] * S, [0] * S
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        raise ValueError(auto_pad)
    pb_out, pe_out = [], []
    for ax in range(S):
        e = eff_kernel(kernel[ax], dilations[ax])
        s = strides[ax]
        if direction == "fwd":
            total = max(e - s, 0)
        else:
            D = sizes[ax]
            r = s if D % s == 0 else D % s
            total = max(e - r, 0)
        if mode == "SAME_UPPER":
            b = total // 2
        else:
            b = (total + 1) // 2
        pb_out.append(b)
        pe_out.append(total - b)
    return pb_out, pe_out


# --------------------------------------------------------------------------
# The oracle (SPEC section 7), NCX tensors, IOX weights, explicit pads
# --------------------------------------------------------------------------

_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _resize_spatial_end(t: torch.Tensor, starts: Sequence[int],
                        sizes: Sequence[int]) -> torch.Tensor:
    """Window [start, start+size) of every spatial axis, zero-extending at the end."""
    S = t.dim() - 2
    need = [starts[a] + sizes[a] - t.shape[2 + a] for a in range(S)]
    if any(n > 0 for n in need):
        pad = []
        for a in reversed(range(S)):
            pad += [0, max(need[a], 0)]
        t = F.pad(t, pad)
    for a in range(S):
        t = t.narrow(2 + a, starts[a], sizes[a])
    return t


def oracle_forward(src, w_iox, bias, strides, pads_begin, pads_end, dilations,
                   output_padding, groups):
    S = src.dim() - 2
    op = list(output_padding) if len(output_padding) else [0] * S
    K = w_iox.shape[2:]
    out_sizes = [forward_size(src.shape[2 + a], K[a], strides[a], dilations[a],
                              pads_begin[a], pads_end[a], op[a]) for a in range(S)]
    N, OC = src.shape[0], w_iox.shape[1] * groups
    if src.numel() == 0 or w_iox.numel() == 0:
        y = src.new_zeros([N, OC] + out_sizes)
    else:
        full = _CONV_T[S](src, w_iox, None, stride=list(strides),
                          dilation=list(dilations), groups=groups)
        y = _resize_spatial_end(full, pads_begin, out_sizes)
    if bias is not None:
        y = y + bias.reshape([1, -1] + [1] * S)
    return y.contiguous()


def oracle_backward_data(diff_dst, w_iox, strides, pads_begin, pads_end, dilations,
                         groups, src_spatial: Optional[Sequence[int]] = None):
    S = diff_dst.dim() - 2
    K = w_iox.shape[2:]
    if src_spatial is None:
        src_spatial = [backward_data_default_size(diff_dst.shape[2 + a], K[a], strides[a],
                                                  dilations[a], pads_begin[a], pads_end[a])
                       for a in range(S)]
    N, IC = diff_dst.shape[0], w_iox.shape[0]
    if diff_dst.numel() == 0 or w_iox.numel() == 0:
        return diff_dst.new_zeros([N, IC] + list(src_spatial))
    pad = []
    for a in reversed(range(S)):
        pad += [pads_begin[a], pads_end[a]]
    z = F.pad(diff_dst, pad)
    # make sure at least one output position exists
    z = _resize_spatial_end(z, [0] * S, [max(z.shape[2 + a], eff_kernel(K[a], dilations[a]))
                                         for a in range(S)])
    x = _CONV[S](z, w_iox, None, stride=list(strides), dilation=list(dilations), groups=groups)
    return _resize_spatial_end(x, [0] * S, list(src_spatial)).contiguous()


def oracle_backward_weights(src, diff_dst, w_iox_shape, strides, pads_begin, pads_end,
                            dilations, groups):
    S = src.dim() - 2
    K = list(w_iox_shape[2:])
    if src.numel() == 0 or diff_dst.numel() == 0:
        return src.new_zeros(list(w_iox_shape))
    pad = []
    for a in reversed(range(S)):
        pad += [pads_begin[a], pads_end[a]]
    z = F.pad(diff_dst, pad)
    z = _resize_spatial_end(z, [0] * S, [max(z.shape[2 + a], eff_kernel(K[a], dilations[a]))
                                         for a in range(S)])
    conv_out = [(z.shape[2 + a] - eff_kernel(K[a], dilations[a])) // strides[a] + 1
                for a in range(S)]
    g_out = _resize_spatial_end(src, [0] * S, conv_out).contiguous()
    weight = src.new_zeros(list(w_iox_shape))
    _, gw, _ = torch.ops.aten.convolution_backward(
        g_out, z.contiguous(), weight, None, list(strides), [0] * S, list(dilations),
        False, [0] * S, groups, [False, True, False])
    return gw.contiguous()


# --------------------------------------------------------------------------
# Op-level references: same argument conventions as torch.ops.graph.*
# Return float64 results in the op's output layout.
# --------------------------------------------------------------------------


def _norm_op(output_padding, S):
    return list(output_padding) if len(output_padding) else [0] * S


def ref_conv_transpose(src, weights, bias=None, *, strides, pads_begin, pads_end, dilations,
                       auto_pad="None", output_padding=(), groups=1, data_format="NXC",
                       weights_format="XOI"):
    S = src.dim() - 2
    x = data_to_ncx(src, data_format).double()
    w = weights_to_iox(weights, weights_format).double()
    K = list(w.shape[2:])
    pb, pe = resolve_pads(auto_pad, list(x.shape[2:]), K, strides, dilations, pads_begin,
                          pads_end, "fwd")
    y = oracle_forward(x, w, None if bias is None else bias.double(), strides, pb, pe,
                       dilations, _norm_op(output_padding, S), groups)
    return data_from_ncx(y, data_format).contiguous()


def ref_conv_transpose_backward_data(diff_dst, weights, *, strides, pads_begin, pads_end,
                                     dilations, auto_pad="None", output_padding=(), groups=1,
                                     data_format="NXC", weights_format="XOI", src_shape=None):
    dy = data_to_ncx(diff_dst, data_format).double()
    w = weights_to_iox(weights, weights_format).double()
    K = list(w.shape[2:])
    pb, pe = resolve_pads(auto_pad, list(dy.shape[2:]), K, strides, dilations, pads_begin,
                          pads_end, "bwd")
    spatial = None
    if src_shape is not None:
        spatial = data_shape_to_ncx(src_shape, data_format)[2:]
    dx = oracle_backward_data(dy, w, strides, pb, pe, dilations, groups, spatial)
    return data_from_ncx(dx, data_format).contiguous()


def ref_conv_transpose_backward_weights(src, diff_dst, *, weights_shape, strides, pads_begin,
                                        pads_end, dilations, auto_pad="None",
                                        output_padding=(), groups=1, data_format="NXC",
                                        weights_format="XOI"):
    x = data_to_ncx(src, data_format).double()
    dy = data_to_ncx(diff_dst, data_format).double()
    w_shape = weights_shape_to_iox(weights_shape, weights_format)
    K = w_shape[2:]
    pb, pe = resolve_pads(auto_pad, list(dy.shape[2:]), K, strides, dilations, pads_begin,
                          pads_end, "bwd")
    gw = oracle_backward_weights(x, dy, w_shape, strides, pb, pe, dilations, groups)
    return weights_from_iox(gw, weights_format).contiguous()


# --------------------------------------------------------------------------
# A naive loop implementation of the SPEC section 3 index map (used only to
# check the oracle itself on tiny problems)
# --------------------------------------------------------------------------


def naive_forward(src, w_iox, bias, strides, pb, pe, dilations, output_padding, groups):
    S = src.dim() - 2
    op = _norm_op(output_padding, S)
    N, IC = src.shape[:2]
    OCg = w_iox.shape[1]
    OC = OCg * groups
    ICg = IC // groups
    K = list(w_iox.shape[2:])
    isz = list(src.shape[2:])
    osz = [forward_size(isz[a], K[a], strides[a], dilations[a], pb[a], pe[a], op[a])
           for a in range(S)]
    y = torch.zeros([N, OC] + osz, dtype=torch.float64)
    for n, gi, a_, b_ in itertools.product(range(N), range(groups), range(ICg), range(OCg)):
        ic, oc = gi * ICg + a_, gi * OCg + b_
        for i in itertools.product(*[range(v) for v in isz]):
            for k in itertools.product(*[range(v) for v in K]):
                o = [i[a] * strides[a] - pb[a] + k[a] * dilations[a] for a in range(S)]
                if all(0 <= o[a] < osz[a] for a in range(S)):
                    y[(n, oc) + tuple(o)] += float(src[(n, ic) + i]) * float(w_iox[(ic, b_) + k])
    if bias is not None:
        y += bias.double().reshape([1, -1] + [1] * S)
    return y


# --------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Problem:
    """One ConvTranspose configuration, described in NCX/IOX terms."""

    N: int
    IC: int
    OC: int
    src_sp: tuple  # src spatial sizes
    K: tuple
    strides: tuple
    dilations: tuple
    pads_begin: tuple
    pads_end: tuple
    output_padding: tuple = ()
    groups: int = 1
    auto_pad: str = "None"
    data_format: str = "NCX"
    weights_format: str = "IOX"
    bias: bool = False
    name: str = ""

    @property
    def S(self) -> int:
        return len(self.src_sp)

    def op_full(self):
        return _norm_op(self.output_padding, self.S)

    def resolved_pads(self):
        return resolve_pads(self.auto_pad, list(self.src_sp), list(self.K), list(self.strides),
                            list(self.dilations), list(self.pads_begin), list(self.pads_end),
                            "fwd")

    def out_spatial(self):
        pb, pe = self.resolved_pads()
        op = self.op_full()
        return [forward_size(self.src_sp[a], self.K[a], self.strides[a], self.dilations[a],
                             pb[a], pe[a], op[a]) for a in range(self.S)]

    # shapes in NCX/IOX
    def src_shape_ncx(self):
        return [self.N, self.IC] + list(self.src_sp)

    def dst_shape_ncx(self):
        return [self.N, self.OC] + self.out_spatial()

    def w_shape_iox(self):
        return [self.IC, self.OC // self.groups] + list(self.K)

    # shapes in the op's formats
    def src_shape(self):
        return data_shape_from_ncx(self.src_shape_ncx(), self.data_format)

    def dst_shape(self):
        return data_shape_from_ncx(self.dst_shape_ncx(), self.data_format)

    def w_shape(self):
        return weights_shape_from_iox(self.w_shape_iox(), self.weights_format)

    def attrs(self, **over):
        a = dict(strides=list(self.strides), pads_begin=list(self.pads_begin),
                 pads_end=list(self.pads_end), dilations=list(self.dilations),
                 auto_pad=self.auto_pad, output_padding=list(self.output_padding),
                 groups=self.groups, data_format=self.data_format,
                 weights_format=self.weights_format)
        a.update(over)
        return a

    def torch_padding(self):
        """(padding, output_padding) for F.conv_transpose*d, or None if not expressible."""
        pb, pe = self.resolved_pads()
        op = self.op_full()
        pad, opad = [], []
        for a in range(self.S):
            t = op[a] + pb[a] - pe[a]
            if pe[a] > pb[a] or t >= max(self.strides[a], self.dilations[a]):
                return None
            pad.append(pb[a])
            opad.append(t)
        return pad, opad

    def ident(self) -> str:
        if self.name:
            return self.name
        def j(v):
            return "x".join(str(x) for x in v) if len(v) else "-"

        return (f"{self.S}d_n{self.N}_ic{self.IC}oc{self.OC}g{self.groups}_i{j(self.src_sp)}"
                f"_k{j(self.K)}_s{j(self.strides)}_d{j(self.dilations)}"
                f"_p{j(self.pads_begin)}-{j(self.pads_end)}_op{j(self.output_padding)}"
                f"_{self.auto_pad}_{self.data_format}_{self.weights_format}"
                f"{'_b' if self.bias else ''}")


def make_tensor(shape, dtype, gen: torch.Generator, integer: bool, lo=-3, hi=3):
    """Random tensor: small integers (exact in every dtype) or uniform reals."""
    shape = [int(v) for v in shape]
    if integer:
        t = torch.randint(lo, hi + 1, shape, generator=gen, dtype=torch.int64)
        return t.to(dtype)
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)


def problem_tensors(p: Problem, dtype, seed=0, integer=False, requires_grad=False):
    """(src, weights, bias) in the problem's layouts."""
    g = torch.Generator().manual_seed(seed)
    x = make_tensor(p.src_shape_ncx(), dtype, g, integer)
    w = make_tensor(p.w_shape_iox(), dtype, g, integer)
    b = make_tensor([p.OC], dtype, g, integer) if p.bias else None
    x = data_from_ncx(x, p.data_format).contiguous()
    w = weights_from_iox(w, p.weights_format).contiguous()
    if requires_grad:
        x.requires_grad_(True)
        w.requires_grad_(True)
        if b is not None:
            b.requires_grad_(True)
    return x, w, b


def diff_dst_tensor(p: Problem, dtype, seed=1, integer=False, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    dy = make_tensor(p.dst_shape_ncx(), dtype, g, integer)
    dy = data_from_ncx(dy, p.data_format).contiguous()
    return dy.requires_grad_(requires_grad)


def is_valid(p: Problem) -> bool:
    if p.groups < 1 or p.IC % p.groups or p.OC % p.groups:
        return False
    op = p.op_full()
    for a in range(p.S):
        if not (0 <= op[a] < max(p.strides[a], p.dilations[a])):
            return False
    return all(o >= 1 for o in p.out_spatial())


def random_problem(rng: random.Random, S: Optional[int] = None, allow_auto_pad=True,
                   allow_zero=False) -> Problem:
    """A random small valid problem (deterministic for a seeded rng)."""
    while True:
        S_ = S or rng.choice([1, 1, 2, 2, 2, 3])
        kind = rng.random()
        if kind < 0.15:
            g = rng.choice([2, 3, 4])
            icg, ocg = 1, rng.choice([1, 1, 2])  # depthwise (multiplier ocg)
        else:
            g = rng.choice([1, 1, 1, 2, 3])
            icg, ocg = rng.randint(1, 3), rng.randint(1, 3)
        N = rng.choice([1, 1, 2, 3])
        if allow_zero and rng.random() < 0.5:
            which = rng.choice(["N", "IC", "OC"])
            if which == "N":
                N = 0
            elif which == "IC":
                icg = 0
            else:
                ocg = 0
        maxI = {1: 6, 2: 4, 3: 3}[S_]
        maxK = {1: 4, 2: 3, 3: 2}[S_]
        isz = tuple(rng.randint(1, maxI) for _ in range(S_))
        K = tuple(rng.randint(1, maxK) for _ in range(S_))
        s = tuple(rng.choice([1, 1, 2, 2, 3]) for _ in range(S_))
        d = tuple(rng.choice([1, 1, 1, 2, 3]) for _ in range(S_))
        pb = tuple(rng.choice([0, 0, 1, 2]) for _ in range(S_))
        pe = tuple(rng.choice([0, 0, 1, 2, 3]) for _ in range(S_))
        if rng.random() < 0.3:
            op = ()
        else:
            op = tuple(rng.randrange(0, max(s[a], d[a])) for a in range(S_))
        ap = "None"
        if allow_auto_pad and rng.random() < 0.4:
            ap = mixed_case(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID", "None"]), rng)
        p = Problem(N=N, IC=g * icg, OC=g * ocg, src_sp=isz, K=K, strides=s, dilations=d,
                    pads_begin=pb, pads_end=pe, output_padding=op, groups=g, auto_pad=ap,
                    data_format=rng.choice(DATA_FORMATS),
                    weights_format=rng.choice(WEIGHTS_FORMATS),
                    bias=rng.random() < 0.5)
        if is_valid(p):
            return p


# Hand-picked problems shared by the autograd / opcheck / export tests.
SAMPLE_PROBLEMS = [
    Problem(N=2, IC=3, OC=2, src_sp=(5,), K=(3,), strides=(2,), dilations=(1,), pads_begin=(1,),
            pads_end=(0,), output_padding=(1,), bias=True, name="1d_s2_asym_op1_bias"),
    Problem(N=1, IC=4, OC=6, src_sp=(3, 4), K=(2, 3), strides=(2, 1), dilations=(1, 2),
            pads_begin=(0, 2), pads_end=(1, 1), groups=2, data_format="NXC",
            weights_format="XOI", bias=True, name="2d_g2_dil_NXC_XOI_bias"),
    Problem(N=2, IC=3, OC=3, src_sp=(3, 3), K=(3, 3), strides=(1, 2), dilations=(1, 1),
            pads_begin=(0, 0), pads_end=(0, 0), groups=3, auto_pad="SAME_LOWER",
            data_format="NCX", weights_format="OIX", name="2d_depthwise_same_lower_OIX"),
    Problem(N=1, IC=2, OC=2, src_sp=(2, 3, 2), K=(2, 2, 1), strides=(2, 1, 2),
            dilations=(1, 2, 1), pads_begin=(1, 0, 0), pads_end=(0, 1, 0),
            output_padding=(1, 0, 1), data_format="NXC", weights_format="XIO",
            bias=True, name="3d_mixed_NXC_XIO_bias"),
]


# --------------------------------------------------------------------------
# Access to the package under test (imported lazily so that collection works
# even when the build is missing; every test using it then fails, not skips)
# --------------------------------------------------------------------------

_TCT = None


def tct():
    global _TCT
    if _TCT is None:
        import torch_convtranspose  # noqa: F401  (registers torch.ops.graph.*)

        _TCT = torch_convtranspose
    return _TCT


def isa_param_names() -> list[str]:
    """ISA names to parametrize over: the known ones plus any the build reports."""
    names = list(KNOWN_ISAS)
    try:
        for n in tct().available_isas():
            if n not in names:
                names.append(n)
    except Exception:  # build missing: the tests themselves will fail on import
        pass
    return names


class use_isa:
    """Context manager: select a kernel ISA (skipping the test where the CPU lacks it),
    restore the previous one afterwards.
    avx512_bf16 also runs an AMD uarch's rules where the CPU's own would keep
    bf16 off its VDPBF16PS tiles (BF16_TILES_UARCH), so that every test on it
    reaches them."""

    def __init__(self, name: Optional[str]):
        self.name = name
        self.old = None
        self.old_uarch = None

    def __enter__(self):
        if self.name is not None:
            require_isa(self.name)  # a skip where this CPU lacks it, not a failure
            m = tct()
            self.old = m.get_isa()
            m.set_isa(self.name)
            if self.name == "avx512_bf16" and m.get_uarch() not in ("zen4", "zen5"):
                self.old_uarch = m.get_uarch()
                m.set_uarch(BF16_TILES_UARCH)
        return self

    def __exit__(self, *exc):
        if self.name is not None:
            tct().set_isa(self.old)
            if self.old_uarch is not None:
                tct().set_uarch(self.old_uarch)
        return False


def require_isa(name: Optional[str]):
    """Skip (only) when the ISA genuinely is not available on this CPU."""
    import pytest

    if name is None:
        return
    avail = tct().available_isas()
    if name not in avail:
        pytest.skip(f"ISA {name!r} not available on this CPU (available: {avail})")


def cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def assert_result(got: torch.Tensor, want64: torch.Tensor, dtype, exact: bool):
    """got must have dtype `dtype`, want64's shape, be contiguous, and equal the
    f64 oracle rounded to dtype (exact) or be close to it (f64 random data)."""
    assert isinstance(got, torch.Tensor)
    assert got.dtype == dtype, f"dtype {got.dtype} != {dtype}"
    assert list(got.shape) == list(want64.shape), f"shape {list(got.shape)} != {list(want64.shape)}"
    assert got.is_contiguous(), f"result not contiguous: strides {got.stride()}"
    if exact:
        want = want64.to(dtype)
        if not torch.equal(got, want):
            diff = (got.double() - want.double()).abs()
            idx = ()
            if diff.numel():
                idx = tuple(int(v) for v in torch.nonzero(diff == diff.max())[0])
            raise AssertionError(
                f"not exact: {int((diff != 0).sum())}/{diff.numel()} elements differ, "
                f"max |diff| {float(diff.max())} at {idx}: got {float(got[idx])}, "
                f"want {float(want[idx])}")
    else:
        torch.testing.assert_close(got, want64.to(dtype), atol=1e-11, rtol=1e-10)


# --------------------------------------------------------------------------
# Backward-op shape rules (SPEC sections 3 and 4)
# --------------------------------------------------------------------------


def bwd_pads(p: Problem, D):
    """Explicit pads of the backward ops for a diff_dst of spatial size D."""
    return resolve_pads(p.auto_pad, list(D), list(p.K), list(p.strides), list(p.dilations),
                        list(p.pads_begin), list(p.pads_end), "bwd")


def bwd_consistent(p: Problem, D) -> bool:
    """D equals the forward formula (backward pads) for some op in [0, max(s, d))."""
    pb, pe = bwd_pads(p, D)
    for a in range(p.S):
        s, d = p.strides[a], p.dilations[a]
        if not any(D[a] == forward_size(p.src_sp[a], p.K[a], s, d, pb[a], pe[a], op)
                   for op in range(max(s, d))):
            return False
    return True


def bwd_default_src_ok(p: Problem, D) -> bool:
    pb, pe = bwd_pads(p, D)
    return all(backward_data_default_size(D[a], p.K[a], p.strides[a], p.dilations[a],
                                          pb[a], pe[a]) >= 1 for a in range(p.S))


def subprocess_env(**extra) -> dict:
    """Environment for child Python processes: they import the same torch_convtranspose."""
    env = dict(os.environ)
    try:
        root = str(pathlib.Path(tct().__file__).resolve().parent.parent)
    except Exception:
        root = str(REPO_ROOT)
    old = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []
    env["PYTHONPATH"] = os.pathsep.join([root] + old)
    env.update(extra)
    return env
