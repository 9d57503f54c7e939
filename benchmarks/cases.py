"""Benchmark problems: a representative subset of oneDNN's benchdnn deconvolution
shapes (resolved_descriptors.csv) plus common model layers.

Every case is given in graph-API terms (pads_begin/pads_end/output_padding, IOX
weights); `torch_params` derives the equivalent torch.nn.functional arguments.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
# The project's reference data: ../shared beside the repository, or $TCT_SHARED_DIR.
SHARED_DIR = os.environ.get("TCT_SHARED_DIR", os.path.join(HERE, "..", "..", "shared"))
DESCRIPTORS_CSV = os.path.join(SHARED_DIR, "data", "benchdnn_deconv", "resolved_descriptors.csv")


@dataclass(frozen=True)
class Case:
    name: str
    source: str  # "benchdnn <file>:<line>" or "model"
    n: int
    ic: int
    oc: int
    groups: int
    in_sp: tuple
    k: tuple
    strides: tuple
    dil: tuple
    pads_begin: tuple
    pads_end: tuple
    output_padding: tuple
    tags: tuple = field(default=())

    @property
    def nsp(self) -> int:
        return len(self.in_sp)

    @property
    def out_sp(self) -> tuple:
        return tuple(
            s * (i - 1) + d * (k - 1) + 1 + op - pb - pe
            for i, k, s, d, pb, pe, op in zip(
                self.in_sp,
                self.k,
                self.strides,
                self.dil,
                self.pads_begin,
                self.pads_end,
                self.output_padding,
            )
        )

    @property
    def flops(self) -> float:
        """Useful FLOPs of every pass: 2*N*IC*(OC/g)*prod(K)*prod(I_src)."""
        return (
            2.0
            * self.n
            * self.ic
            * (self.oc // self.groups)
            * math.prod(self.k)
            * math.prod(self.in_sp)
        )

    @property
    def weights_shape(self) -> tuple:  # IOX, the torch ConvTranspose weight layout
        return (self.ic, self.oc // self.groups) + tuple(self.k)

    def src_shape(self, layout: str) -> tuple:
        return self._shape(self.ic, self.in_sp, layout)

    def dst_shape(self, layout: str) -> tuple:
        return self._shape(self.oc, self.out_sp, layout)

    def _shape(self, c, sp, layout):
        return (self.n,) + tuple(sp) + (c,) if layout == "nxc" else (self.n, c) + tuple(sp)

    def describe(self) -> str:
        def j(t):
            return "x".join(str(v) for v in t)

        s = f"mb{self.n} g{self.groups} {self.ic}->{self.oc} {j(self.in_sp)}->{j(self.out_sp)}"
        s += f" k{j(self.k)}"
        if any(v != 1 for v in self.strides):
            s += f" s{j(self.strides)}"
        if any(v != 1 for v in self.dil):
            s += f" d{j(self.dil)}"
        if any(self.pads_begin) or any(self.pads_end):
            s += f" p{j(self.pads_begin)}/{j(self.pads_end)}"
        if any(self.output_padding):
            s += f" op{j(self.output_padding)}"
        return s


@dataclass(frozen=True)
class TorchParams:
    padding: tuple
    output_padding: tuple
    torch_out_sp: tuple  # spatial size of torch's output
    crop_start: tuple  # where our output starts inside torch's
    out_sp: tuple  # our output's spatial size

    @property
    def needs_crop(self) -> bool:
        return any(self.crop_start) or self.torch_out_sp != self.out_sp


def torch_params(case: Case) -> TorchParams:
    """torch's (padding, output_padding) for the case and the crop of torch's output.

    torch crops `padding` on both sides and appends `output_padding` (< max(s, d))
    at the end. When pads_end > pads_begin (+ output_padding) torch can't express
    the pads: it then runs with the largest usable padding P <= pads_begin and
    output_padding OP, computes a slightly larger output, and the benchmark crops
    [pads_begin - P, pads_begin - P + O) out of it (a view).
    """
    pads, ops, starts, touts = [], [], [], []
    for i, k, s, d, pb, pe, op in zip(
        case.in_sp,
        case.k,
        case.strides,
        case.dil,
        case.pads_begin,
        case.pads_end,
        case.output_padding,
    ):
        full = s * (i - 1) + d * (k - 1) + 1
        m = max(s, d)
        p = min(pb, m - 1 + pe - op)
        o = max(0, op - pe + p)
        assert 0 <= p and 0 <= o < m, (case.name, p, o)
        pads.append(p)
        ops.append(o)
        starts.append(pb - p)
        touts.append(full - 2 * p + o)
    return TorchParams(tuple(pads), tuple(ops), tuple(touts), tuple(starts), case.out_sp)


def _tuple(v: str, nsp: int) -> tuple:
    t = tuple(int(x) for x in v.split("x")) if v else ()
    assert len(t) == nsp, (v, nsp)
    return t


def _load_csv():
    if not os.path.exists(DESCRIPTORS_CSV):
        raise SystemExit(
            f"bench: {DESCRIPTORS_CSV} not found; set TCT_SHARED_DIR to the shared data folder"
        )
    rows = {}
    with open(DESCRIPTORS_CSV, newline="") as f:
        for r in csv.DictReader(f):
            rows[(r["file"], int(r["line"]))] = r
    return rows


# Layers with at least this many channels per group on both sides do enough
# work per byte to run near the FMA peak ("deep" tag; bench.py's compute-bound
# summary).
DEEP_CHANNELS = 128


def _tags(case: Case) -> tuple:
    t = [f"{case.nsp}d"]
    if any(s > 1 for s in case.strides):
        t.append("strided")
    if any(d > 1 for d in case.dil):
        t.append("dilated")
    if case.groups > 1:
        t.append("depthwise" if case.groups == case.ic == case.oc else "grouped")
    if all(k == 1 for k in case.k):
        t.append("1x1")
    icg, ocg = case.ic // case.groups, case.oc // case.groups
    if case.groups != case.ic and (icg % 16 or ocg % 16):
        t.append("tail")
    if icg >= DEEP_CHANNELS and ocg >= DEEP_CHANNELS:
        t.append("deep")  # compute-bound: the summary's % of peak targets
    if torch_params(case).needs_crop:
        t.append("crop")
    return tuple(t)


def from_benchdnn(rows, file: str, line: int, mb: int, alias: str) -> Case:
    r = rows[(file, line)]
    nsp = int(r["ndims"]) - 2
    c = Case(
        name=alias,
        source="benchdnn %s:%d %s" % (file, line, r["name"].strip('"')),
        n=mb,
        ic=int(r["ic"]),
        oc=int(r["oc"]),
        groups=int(r["g"]),
        in_sp=_tuple(r["in_sp"], nsp),
        k=_tuple(r["k"], nsp),
        strides=_tuple(r["strides"], nsp),
        dil=_tuple(r["dil_graph_torch"], nsp),
        pads_begin=_tuple(r["graph_pads_begin"], nsp),
        pads_end=_tuple(r["graph_pads_end"], nsp),
        output_padding=_tuple(r["graph_output_padding"], nsp),
    )
    assert c.out_sp == _tuple(r["out_sp"], nsp), (file, line, c.out_sp, r["out_sp"])
    return c


def model(name: str, n: int, ic: int, oc: int, in_sp, k, s, p, op=0, d=1, g=1) -> Case:
    """A layer as written in a model: torch-style symmetric padding p."""
    nsp = len(in_sp)

    def rep(v):
        return tuple(v) if isinstance(v, (tuple, list)) else (v,) * nsp

    # torch padding p + output_padding op == graph pads (p, p) + output_padding op
    return Case(
        name=name,
        source="model",
        n=n,
        ic=ic,
        oc=oc,
        groups=g,
        in_sp=tuple(in_sp),
        k=rep(k),
        strides=rep(s),
        dil=rep(d),
        pads_begin=rep(p),
        pads_end=rep(p),
        output_padding=rep(op),
    )


def _with_tags(c: Case) -> Case:
    return Case(**{**c.__dict__, "tags": _tags(c)})


# (file, line, mb, short alias) of the benchdnn problems benchmarked (rows of
# resolved_descriptors.csv); mb overridden to keep the full run short.
_BENCHDNN = [
    # 1D
    ("shapes_1d", 5, 32, "1d_alexnet_deconv3"),
    ("shapes_1d", 6, 32, "1d_googlenet_conv1_s2"),
    ("shapes_1d", 7, 16, "1d_masknet_deconv1_op1"),
    ("shapes_1d", 2, 64, "1d_dilated_asym_pads"),
    ("option_set_fwks_key_gpu", 6, 1, "1d_vocoder_512to256_k16s8"),
    ("shapes_ci", 25, 64, "1d_ci_tail_depthwise"),
    # 2D
    ("shapes_2d", 1, 4, "2d_alexnet_deconv1_k11s4"),
    ("shapes_2d", 2, 2, "2d_alexnet_deconv2_g2"),
    ("shapes_2d", 37, 8, "2d_googlenet_4d_3x3"),
    ("shapes_1x1", 10, 16, "2d_googlenet_4a_1x1"),
    ("shapes_2d", 60, 4, "2d_resnet50_1x1_s2_op1"),
    ("shapes_dilated", 17, 8, "2d_alexnet_dil3_g2"),
    ("shapes_dilated", 22, 4, "2d_googlenet_conv1_s2_d2"),
    ("option_set_fwks_ext_gpu", 12, 1, "2d_512to256_k4s2_32x32"),
    ("option_set_fwks_ext_gpu", 16, 1, "2d_unet_1024to512_k2s2"),
    ("option_set_fwks_ext_gpu", 29, 4, "2d_512to512_k3s2_4x4"),
    ("option_set_fwks_ext_gpu", 3, 1, "2d_36to4_k3s3_360x640"),
    ("shapes_ci", 38, 32, "2d_ci_oc_tail_gemm"),
    ("shapes_ci", 41, 32, "2d_ci_oc_tail_grouped"),
    ("shapes_ci", 44, 64, "2d_ci_tail_depthwise"),
    # 3D
    ("shapes_3d", 8, 1, "3d_unet_deconv8"),
    ("shapes_dilated", 10, 1, "3d_unet_dilated_deconv8"),
    ("option_set_fwks_ext_gpu", 42, 1, "3d_unet_320to320_k2s2"),
    ("harness_deconv_regression_general_int8", 22, 16, "3d_1x1_s2"),
    ("shapes_ci", 58, 8, "3d_ci_grouped"),
    ("shapes_ci", 61, 8, "3d_ci_depthwise"),
    ("shapes_ci", 57, 8, "3d_ci_ic_tail_gemm"),
]

_MODELS = [
    # DCGAN-style generator (k4 s2 p1, doubles the resolution)
    model("dcgan_z_100to512_k4", 64, 100, 512, (1, 1), 4, 1, 0),
    model("dcgan_512to256_8x8", 4, 512, 256, (8, 8), 4, 2, 1),
    model("dcgan_256to128_16x16", 4, 256, 128, (16, 16), 4, 2, 1),
    model("dcgan_128to64_32x32", 4, 128, 64, (32, 32), 4, 2, 1),
    model("dcgan_64to3_64x64", 4, 64, 3, (64, 64), 4, 2, 1),
    # U-Net decoder up-convolution (k2 s2)
    model("unet2d_128to64_k2s2_64x64", 2, 128, 64, (64, 64), 2, 2, 0),
    model("unet3d_128to64_k2s2_16^3", 1, 128, 64, (16, 16, 16), 2, 2, 0),
    model("unet3d_256to128_k2s2_8^3", 2, 256, 128, (8, 8, 8), 2, 2, 0),
    # 1D audio upsamplers (HiFi-GAN V1: k16 s8 p4, then k4 s2 p1)
    model("hifigan_512to256_k16s8", 1, 512, 256, (256,), 16, 8, 4),
    model("hifigan_128to64_k4s2", 1, 128, 64, (4096,), 4, 2, 1),
    # learned depthwise 2x upsampling (segmentation heads)
    model("dw_up_64ch_k4s2_32x32", 8, 64, 64, (32, 32), 4, 2, 1, g=64),
]

# Small problems for --quick (smoke test; fine even with a slow reference kernel).
_QUICK = [
    model("q_dcgan_128to64_16x16", 1, 128, 64, (16, 16), 4, 2, 1),
    model("q_hifigan_64to32_k16s8", 1, 64, 32, (64,), 16, 8, 4),
    model("q_unet3d_32to16_k2s2_8^3", 1, 32, 16, (8, 8, 8), 2, 2, 0),
    model("q_grouped_dil2_tail", 2, 20, 12, (9, 9), 3, 1, 2, d=2, g=4),
    model("q_dw_up_k4s2", 2, 16, 16, (12, 12), 4, 2, 1, g=16),
]


def all_cases(quick: bool = False) -> list:
    rows = _load_csv()
    if quick:
        cases = list(_QUICK) + [from_benchdnn(rows, "shapes_ci", 38, 4, "q_ci_2d_oc_tail_gemm")]
    else:
        cases = [from_benchdnn(rows, f, line, mb, alias) for f, line, mb, alias in _BENCHDNN]
        cases += _MODELS
    return [_with_tags(c) for c in cases]
