// Schemas (SPEC §1) and the kernels behind each dispatch key. Everything is
// registered in C++, so a LibTorch-only process has all of it.
#include <torch/library.h>

#include "kernels/dispatch.h"
#include "kernels/tune.h"
#include "kernels/x86/peak.h"
#include "ops/common.h"
#include "ops/ops.h"

namespace tct {
namespace ops {

namespace {
c10::OperatorHandle op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}
}  // namespace

Tensor call_conv_transpose(TCT_CONV_TRANSPOSE_ARGS) {
  static auto handle = op("graph::conv_transpose").typed<decltype(conv_transpose_cpu)>();
  return handle.call(src, weights, bias, strides, pads_begin, pads_end, dilations, auto_pad,
                     output_padding, groups, data_format, weights_format);
}

Tensor call_backward_data(TCT_BACKWARD_DATA_ARGS) {
  static auto handle =
      op("graph::conv_transpose_backward_data").typed<decltype(backward_data_cpu)>();
  return handle.call(diff_dst, weights, strides, pads_begin, pads_end, dilations, auto_pad,
                     output_padding, groups, data_format, weights_format, src_shape);
}

Tensor call_backward_weights(TCT_BACKWARD_WEIGHTS_ARGS) {
  static auto handle =
      op("graph::conv_transpose_backward_weights").typed<decltype(backward_weights_cpu)>();
  return handle.call(src, diff_dst, weights_shape_input, strides, pads_begin, pads_end, dilations,
                     auto_pad, output_padding, groups, data_format, weights_format,
                     weights_shape);
}

namespace {

void set_isa(c10::string_view name) {
  checked([&] {
    set_active_isa(parse_isa(std::string(name)));
    return 0;
  });
}

std::string get_isa() { return isa_name(active_isa()); }

void set_ncx_path(c10::string_view name) {
  checked([&] {
    tct::set_ncx_path(parse_ncx_path(std::string(name)));
    return 0;
  });
}

std::string get_ncx_path() { return ncx_path_name(ncx_path()); }

void set_uarch_name(c10::string_view name) {
  checked([&] {
    set_uarch(parse_uarch(std::string(name)));
    return 0;
  });
}

std::string get_uarch() { return uarch_name(active_uarch()); }

std::string detected_uarch() { return uarch_name(classify_uarch(read_cpuid())); }

std::vector<std::string> available_isas() {
  std::vector<std::string> out;
  for (Isa isa : {Isa::Reference, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16, Isa::Avx512Amx})
    if (isa_supported(isa)) out.emplace_back(isa_name(isa));
  return out;
}

double fma_peak_gflops(int64_t nthreads, double seconds) {
  TORCH_CHECK(nthreads >= 1, "fma_peak_gflops: nthreads must be >= 1, got ", nthreads);
  return x86::fma_peak_gflops(vector_isa(active_isa()), static_cast<int>(nthreads), seconds);
}

void set_benchmark(bool enabled) { set_benchmark_enabled(enabled); }
bool get_benchmark() { return benchmark_enabled(); }

void set_benchmark_file(c10::string_view path) {
  checked([&] {
    set_tuning_file(std::string(path));
    return 0;
  });
}

std::string get_benchmark_file() { return tuning_file(); }

void save_benchmark_cache(c10::string_view path) {
  checked([&] {
    save_tuning_cache(std::string(path));
    return 0;
  });
}

void clear_benchmark_cache() { clear_tuning_cache(); }

// One line per entry: key, tab, chosen label, tab, source (timed / file),
// then per candidate a tab, its label, '=' and its time in ms.
std::vector<std::string> benchmark_entries() {
  std::vector<std::string> out;
  for (const TuningEntry& e : tuning_entries()) {
    std::string line = e.key + "\t" + e.candidates[e.chosen].label + "\t" +
                       (e.from_file ? "file" : "timed");
    for (const TuningCandidate& c : e.candidates)
      line += "\t" + c.label + "=" + std::to_string(c.seconds * 1e3);
    out.push_back(std::move(line));
  }
  return out;
}

}  // namespace
}  // namespace ops
}  // namespace tct

TORCH_LIBRARY(graph, m) {
  m.def(
      "conv_transpose(Tensor src, Tensor weights, Tensor? bias=None, *, int[] strides, "
      "int[] pads_begin, int[] pads_end, int[] dilations, str auto_pad=\"None\", "
      "int[] output_padding=[], int groups=1, str data_format=\"NXC\", "
      "str weights_format=\"XOI\") -> Tensor");
  m.def(
      "conv_transpose_backward_data(Tensor diff_dst, Tensor weights, *, int[] strides, "
      "int[] pads_begin, int[] pads_end, int[] dilations, str auto_pad=\"None\", "
      "int[] output_padding=[], int groups=1, str data_format=\"NXC\", "
      "str weights_format=\"XOI\", SymInt[]? src_shape=None) -> Tensor");
  m.def(
      "conv_transpose_backprop_data(Tensor output_delta, Tensor filter, *, int[] strides, "
      "int[] pads_begin, int[] pads_end, int[] dilations, str auto_pad=\"None\", "
      "int[] output_padding=[], int groups=1, str data_format=\"NXC\", "
      "str filter_format=\"XIO\", SymInt[]? src_shape=None) -> Tensor");
  m.def(
      "conv_transpose_backward_weights(Tensor src, Tensor diff_dst, "
      "Tensor? weights_shape_input=None, *, int[] strides, int[] pads_begin, int[] pads_end, "
      "int[] dilations, str auto_pad=\"None\", int[] output_padding=[], int groups=1, "
      "str data_format=\"NXC\", str weights_format=\"XOI\", SymInt[] weights_shape=[]) "
      "-> Tensor");
}

TORCH_LIBRARY_IMPL(graph, CPU, m) {
  m.impl("conv_transpose", &tct::ops::conv_transpose_cpu);
  m.impl("conv_transpose_backward_data", &tct::ops::backward_data_cpu);
  m.impl("conv_transpose_backward_weights", &tct::ops::backward_weights_cpu);
}

TORCH_LIBRARY_IMPL(graph, Meta, m) {
  m.impl("conv_transpose", &tct::ops::conv_transpose_meta);
  m.impl("conv_transpose_backward_data", &tct::ops::backward_data_meta);
  m.impl("conv_transpose_backward_weights", &tct::ops::backward_weights_meta);
}

TORCH_LIBRARY_IMPL(graph, Autograd, m) {
  m.impl("conv_transpose", &tct::ops::conv_transpose_autograd);
  m.impl("conv_transpose_backward_data", &tct::ops::backward_data_autograd);
  m.impl("conv_transpose_backward_weights", &tct::ops::backward_weights_autograd);
}

TORCH_LIBRARY_IMPL(graph, AutocastCPU, m) {
  m.impl("conv_transpose", &tct::ops::conv_transpose_autocast);
  m.impl("conv_transpose_backward_data", &tct::ops::backward_data_autocast);
  m.impl("conv_transpose_backward_weights", &tct::ops::backward_weights_autocast);
}

// The older name is a thin alias: autograd, meta and CPU come from the op it calls.
TORCH_LIBRARY_IMPL(graph, CompositeImplicitAutograd, m) {
  m.impl("conv_transpose_backprop_data", &tct::ops::backprop_data);
}

// Kernel selection, the call plans and the machine's FMA peak, for tests and benchmarks.
TORCH_LIBRARY(torch_convtranspose, m) {
  m.def("set_isa(str isa) -> ()", &tct::ops::set_isa);
  m.def("get_isa() -> str", &tct::ops::get_isa);
  m.def("available_isas() -> str[]", &tct::ops::available_isas);
  m.def("set_uarch(str uarch) -> ()", &tct::ops::set_uarch_name);
  m.def("get_uarch() -> str", &tct::ops::get_uarch);
  m.def("detected_uarch() -> str", &tct::ops::detected_uarch);
  m.def("set_ncx_path(str path) -> ()", &tct::ops::set_ncx_path);
  m.def("get_ncx_path() -> str", &tct::ops::get_ncx_path);
  m.def("fma_peak_gflops(int nthreads, float seconds) -> float", &tct::ops::fma_peak_gflops);
  m.def("plans_begin(bool execute) -> ()", &tct::ops::plans_begin);
  m.def("plans_end() -> str[]", &tct::ops::plans_end);
  m.def("set_benchmark(bool enabled) -> ()", &tct::ops::set_benchmark);
  m.def("get_benchmark() -> bool", &tct::ops::get_benchmark);
  m.def("set_benchmark_file(str path) -> ()", &tct::ops::set_benchmark_file);
  m.def("get_benchmark_file() -> str", &tct::ops::get_benchmark_file);
  m.def("save_benchmark_cache(str path) -> ()", &tct::ops::save_benchmark_cache);
  m.def("clear_benchmark_cache() -> ()", &tct::ops::clear_benchmark_cache);
  m.def("benchmark_entries() -> str[]", &tct::ops::benchmark_entries);
}
