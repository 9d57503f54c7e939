// Loads a TorchScript module that calls torch.ops.graph.conv_transpose and runs it.
//
//   run_torchscript MODEL.ts INPUT.pt [OUTPUT.pt]
//
// INPUT.pt: a tensor saved with torch.save; OUTPUT.pt (optional): the result, readable
// with torch.load. The graph:: ops are registered because this program links
// TorchConvTranspose::ops (see CMakeLists.txt): no code here names them.
#include <torch/script.h>

#include "tensor_io.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: " << argv[0] << " MODEL.ts INPUT.pt [OUTPUT.pt]\n";
    return 2;
  }
  try {
    torch::jit::Module module = torch::jit::load(argv[1]);
    module.eval();
    torch::Tensor input = example::load_tensor(argv[2]);
    c10::InferenceMode inference;
    torch::Tensor output = module.forward({input}).toTensor();
    example::print_summary("output", output);
    if (argc == 4) example::save_tensor(output, argv[3]);
  } catch (const std::exception& e) {
    std::cerr << "run_torchscript: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
