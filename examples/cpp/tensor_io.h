// Tensors in and out of files written / read by Python's torch.save / torch.load.
#pragma once

#include <torch/script.h>  // torch::jit::pickle_load / pickle_save

#include <fstream>
#include <iostream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace example {

inline torch::Tensor load_tensor(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return torch::jit::pickle_load(bytes).toTensor();
}

inline void save_tensor(const torch::Tensor& t, const std::string& path) {
  std::vector<char> bytes = torch::jit::pickle_save(t);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline void print_summary(const char* what, const torch::Tensor& t) {
  std::cout << what << ": shape " << t.sizes() << ", dtype " << t.dtype() << ", sum "
            << t.sum().item<double>() << "\nfirst values:";
  auto flat = t.flatten();
  for (int64_t i = 0; i < std::min<int64_t>(flat.numel(), 6); ++i) {
    std::cout << ' ' << flat[i].item<float>();
  }
  std::cout << std::endl;
}

}  // namespace example
