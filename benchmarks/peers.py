"""A second peer for bench.py: onnxruntime's ConvTranspose (CPU execution provider),
the pick of inference users. Forward, f32, on NCX data (ONNX's only layout for the
op), with the weights and bias as initializers (constant-folded and pre-packed by
onnxruntime, as in a deployed model) and the same thread count as ours and torch's.

ONNX ConvTranspose takes every attribute bench.py's cases use: asymmetric pads
(pads = [begins..., ends...]: our pads_begin / pads_end directly, crops included),
output_padding, dilations, group. Input and output are bound once (IOBinding), so
a timed call is the session's run alone, with onnxruntime allocating the output
as torch and ours do. Intra-op threads do not spin after a call (allow_spinning 0),
so that they do not take cores from the op timed next.
"""

from __future__ import annotations

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # (bench.py runs without the peer)
    ort = None


def available() -> bool:
    return ort is not None


def version() -> str:
    return ort.__version__ if ort is not None else ""


class OrtConvTranspose:
    """One case's forward as an onnxruntime session: call() runs it once."""

    def __init__(self, case, x_ncx, w_iox, bias, threads: int):
        S = len(case.k)
        y_shape = [case.n, case.oc] + list(case.out_sp)
        node = helper.make_node(
            "ConvTranspose",
            ["X", "W", "B"] if bias is not None else ["X", "W"],
            ["Y"],
            strides=list(case.strides),
            pads=list(case.pads_begin) + list(case.pads_end),
            dilations=list(case.dil),
            output_padding=list(case.output_padding) or [0] * S,
            group=case.groups,
            kernel_shape=list(case.k),
        )
        inits = [numpy_helper.from_array(w_iox.detach().contiguous().numpy(), "W")]
        if bias is not None:
            inits.append(numpy_helper.from_array(bias.detach().contiguous().numpy(), "B"))
        graph = helper.make_graph(
            [node],
            "conv_transpose",
            [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_ncx.shape))],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)],
            inits,
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = min(model.ir_version, 9)
        onnx.checker.check_model(model)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.sess = ort.InferenceSession(
            model.SerializeToString(), so, providers=["CPUExecutionProvider"]
        )
        self.x = np.ascontiguousarray(x_ncx.detach().numpy())
        self.io = self.sess.io_binding()
        self.io.bind_cpu_input("X", self.x)
        self.io.bind_output("Y", "cpu")

    def __call__(self):
        self.sess.run_with_iobinding(self.io)

    def result(self):
        """The last call's output, as a torch tensor (NCX)."""
        import torch

        return torch.from_numpy(self.io.copy_outputs_to_cpu()[0])
