// Runs an AOTInductor package (torch._inductor.aoti_compile_and_package of a
// torch.export'ed module calling torch.ops.graph.conv_transpose).
//
//   run_aoti MODEL.pt2 INPUT.pt [OUTPUT.pt]
//
// Inductor has no code of its own for graph:: ops: the compiled model calls them
// through its proxy executor, i.e. through the dispatcher of this process, where
// linking TorchConvTranspose::ops registered them.
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include "tensor_io.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: " << argv[0] << " MODEL.pt2 INPUT.pt [OUTPUT.pt]\n";
    return 2;
  }
  try {
    torch::inductor::AOTIModelPackageLoader loader(argv[1]);
    torch::Tensor input = example::load_tensor(argv[2]);
    c10::InferenceMode inference;
    std::vector<torch::Tensor> outputs = loader.run({input});
    if (outputs.size() != 1) {
      throw std::runtime_error("expected 1 output, the model gave " + std::to_string(outputs.size()));
    }
    example::print_summary("output", outputs[0]);
    if (argc == 4) example::save_tensor(outputs[0], argv[3]);
  } catch (const std::exception& e) {
    std::cerr << "run_aoti: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
