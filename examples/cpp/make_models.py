"""Writes the models the C++ examples run, from one small module calling
torch.ops.graph.conv_transpose:

    python examples/cpp/make_models.py OUT_DIR

OUT_DIR/model.ts   TorchScript (torch.jit.script), for run_torchscript
OUT_DIR/model.pt2  AOTInductor package (torch.export + aoti_compile_and_package), for run_aoti
OUT_DIR/input.pt   an input tensor (torch.save), for both
"""

import argparse
import os

import torch

import torch_convtranspose  # noqa: F401  (registers torch.ops.graph.*)


class Upsample(torch.nn.Module):
    """A stride-2 transposed convolution (NCX data, IOX weights: the layouts of
    torch.nn.ConvTranspose2d), two groups, then ReLU."""

    def __init__(self, in_channels: int = 4, out_channels: int = 6, groups: int = 2):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(
            torch.randn(in_channels, out_channels // groups, 3, 3, generator=g) * 0.3)
        self.bias = torch.nn.Parameter(torch.randn(out_channels, generator=g) * 0.1)
        self.groups = groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.graph.conv_transpose(
            x, self.weight, self.bias, strides=[2, 2], pads_begin=[1, 1], pads_end=[1, 1],
            dilations=[1, 1], output_padding=[1, 1], groups=self.groups,
            data_format="NCX", weights_format="IOX")
        return torch.relu(y)


def example_input() -> torch.Tensor:
    return torch.randn(2, 4, 5, 7, generator=torch.Generator().manual_seed(1))


def save_all(out_dir: str) -> dict:
    """Writes model.ts, model.pt2 and input.pt into out_dir; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    model = Upsample().eval()
    x = example_input()
    paths = {name: os.path.join(out_dir, name) for name in ("model.ts", "model.pt2", "input.pt")}
    torch.jit.script(model).save(paths["model.ts"])
    with torch.no_grad():
        exported = torch.export.export(model, (x,))
        torch._inductor.aoti_compile_and_package(exported, package_path=paths["model.pt2"])
    torch.save(x, paths["input.pt"])
    return paths


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    for path in save_all(parser.parse_args().out_dir).values():
        print(f"wrote {path}")
