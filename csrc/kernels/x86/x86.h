// Entry points of the x86 f32 drivers (AVX-512 and AVX2), called by the
// call plans' routes (kernels/routes.cpp) with the ISA the plan read once;
// isa is never Isa::Reference and the CPU is known to support it. Each
// returns false when it has no kernel for the problem (the route then runs
// the reference). Activations are dense channels-last unless stated.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "../dispatch.h"
#include "convert.h"

namespace tct {
namespace x86 {

bool forward_f32(Isa isa, const ConvProblem& p, const float* src, WeightsView w,
                 const float* bias, float* dst, int nthreads);
bool backward_data_f32(Isa isa, const ConvProblem& p, const float* diff_dst, WeightsView w,
                       float* diff_src, int nthreads);
// bf16 forward / backward-data on the pair tiles of isa (Avx512Amx: AMX;
// Avx512Bf16: VDPBF16PS; only where isa_supported(isa)):
// the f32 driver over bf16 activations (dense channels-last, read in place)
// and those tiles; weights bf16 (any strides), bias f32. The
// result, dense channels-last, is bf16 rounded once by the tiles where
// info.out16 (a reduction in one chunk), else f32 (the caller rounds it
// once); out16 must be info.out16. False where the tiles do not take the
// problem (info.applies: not depthwise, small groups or few output columns).
// to_dst: dst / diff_src is the caller's tensor rather than a workspace read
// right after, so that large 16-bit results may be written with streaming
// stores (ConvTable::stream16_bytes).
struct PairsConvInfo {
  bool applies = false, out16 = false;
};
PairsConvInfo conv_bf16_pairs_info(Isa isa, Pass pass, const ConvProblem& p, int nthreads);
bool forward_bf16_pairs(Isa isa, const ConvProblem& p, const uint16_t* src, WeightsView w,
                        const float* bias, void* dst, bool out16, int nthreads,
                        bool to_dst = false);
bool backward_data_bf16_pairs(Isa isa, const ConvProblem& p, const uint16_t* diff_dst,
                              WeightsView w, void* diff_src, bool out16, int nthreads,
                              bool to_dst = false);
std::string describe_conv_bf16_pairs(Isa isa, Pass pass, const ConvProblem& p, int nthreads,
                                     bool to_dst = false);
// The f32 forward / backward-data kernels writing a 16-bit result (route
// convert16, direct): in f32 dense channels-last, w f32, out dense
// channels-last bf16 (out16 = 1) or f16 (2), each element the f32 sum
// rounded once by the GEMM, depthwise or dot tiles. Applies where the plan
// is those tiles with one reduction chunk; false otherwise. With in16 (the
// applies check: the kind, 1 or 2; the call: true, the kind being out16)
// the input is the dense channels-last 16-bit tensor itself, read by the
// depthwise or dot tiles that widen as they load. With w16 (the widening of
// out16's kind; heuristics A15), w's data is the 16-bit weights: the GEMM
// packing widens them as it reads them where its order allows, else the
// call runs on f32_weights() (the same strides, widened by the caller).
// to_dst: out is the caller's tensor (large depthwise results may stream).
bool conv_f32_out16_applies(Isa isa, Pass pass, const ConvProblem& p, int nthreads,
                            int in16 = 0);
bool conv_f32_out16(Isa isa, Pass pass, const ConvProblem& p, const void* in, bool in16,
                    WeightsView w, const float* bias, uint16_t* out, int out16, int nthreads,
                    bool to_dst, Widen16Fn w16 = nullptr,
                    const std::function<const void*()>& f32_weights = nullptr);
// Where the GEMM plan needs several reduction chunks (no 16-bit result from
// the tiles): the f32 result into out (f32, dense channels-last; the caller
// rounds it once), in f32, w the 16-bit weights packed as read by w16
// (heuristics A23; else run on f32_weights()). Applies where the packing
// of dense IOX weights would read 16 bits.
bool conv_f32_wide16_applies(Isa isa, Pass pass, const ConvProblem& p, int nthreads);
bool conv_f32_wide16(Isa isa, Pass pass, const ConvProblem& p, const float* in, WeightsView w,
                     const float* bias, float* out, int kind, int nthreads, Widen16Fn w16,
                     const std::function<const void*()>& f32_weights);
// (The description assumes dense IOX weights: ":w16" in its pack field where
// those would be packed from 16 bits; f32_out: conv_f32_wide16's plan.)
std::string describe_conv_f32_out16(Isa isa, Pass pass, const ConvProblem& p, int nthreads,
                                    int in16 = 0, bool f32_out = false, bool to_dst = false);
// The channels-last f32 forward / backward-data planned once and run on
// several inputs of the same problem (the slabs of route convert16: the
// driver's tables are built once, not per slab). out16 (1 bf16, 2 f16): a
// 16-bit result rounded by the GEMM tiles where prepared_out16 says they
// do, else (and with out16 0) an f32 result. w: its strides (its data is
// read by run_prepared_conv's w).
struct PreparedConv;
std::shared_ptr<const PreparedConv> prepare_conv_f32(Isa isa, Pass pass, const ConvProblem& p,
                                                     const WeightsView& w, int out16,
                                                     int nthreads);
bool prepared_out16(const PreparedConv& c);
bool run_prepared_conv(const PreparedConv& c, const float* in, WeightsView w, const float* bias,
                       void* out);
// bf16 backward-weights on the pair tiles of isa (Avx512Amx, Avx512Bf16;
// bwd_weights_bf16_common.cpp): src dense in
// CNX order (C, N, X...: each channel's pixels of every image in a row) and
// diff_dst dense channels-last, both bf16; the gradient, each f32 sum
// rounded once, written into diff_w (bf16, any strides); scratch: at least
// bww_bf16_pairs_scratch_floats floats, 4-byte aligned (the caller keeps it
// between calls). False where it does not apply (bww_bf16_pairs_applies: at
// least 32 channels per group on both sides, or few output channels with
// fused taps).
bool bww_bf16_pairs_applies(Isa isa, const ConvProblem& p);
int64_t bww_bf16_pairs_scratch_floats(Isa isa, const ConvProblem& p, int nthreads);
bool backward_weights_bf16_pairs(Isa isa, const ConvProblem& p, const uint16_t* src_cnx,
                                 const uint16_t* dy_nxc, WeightsView diff_w, float* scratch,
                                 int nthreads);
std::string describe_bwd_weights_bf16_pairs(Isa isa, const ConvProblem& p, int nthreads);
// Share of the lanes that hold real columns in the GEMM register tiles that
// forward_f32 / backward_data_f32 pick for ncol columns per group (17 columns
// in tiles of 32: 0.53).
double gemm_column_share(Isa isa, int64_t ncol);
// Whether backward_data_f32's GEMM tiles fuse the innermost taps (one group,
// at most 16 diff_dst channels, dilation 1 innermost, K2 > 1, not the
// dot-product tiles): those tiles run line by line, dropping a line's padded
// outer taps, when the packed weights are small.
bool backward_data_fuses_taps(const ConvProblem& p);
// Share of the (src pixel, tap) pairs that land inside dst (below 1 where
// pads crop the output, or on small images under large kernels;
// planar_f32_common.cpp).
double valid_tap_share(const ConvProblem& p);
// Whether backward_weights_f32 can fuse consecutive innermost taps into one
// tile (one group, dilation 1 innermost, K2 > 1, a small GEMM): it does when
// diff_dst is the broadcast side (few diff_dst channels).
bool innermost_taps_fusable(const ConvProblem& p);
bool backward_weights_f32(Isa isa, const ConvProblem& p, const float* src, const float* diff_dst,
                          WeightsView diff_w, int nthreads);
// The same driver on 16-bit activations (kind 1 bf16, 2 f16; dense
// channels-last src and diff_dst), widened as its packing copies them or
// its tiles on pixel lists load them, into the f32 gradient diff_w (the
// caller rounds it once). Applies (decided on a dense IOX gradient) where
// the table has the f32 plan's kernels in a 16-bit form and GEMM tiles on
// pixel lists would load each element at most kMaxListWiden times
// (heuristics A14); the call then runs whatever the gradient's strides plan.
bool backward_weights16_applies(Isa isa, const ConvProblem& p, int nthreads, int kind);
bool backward_weights16(Isa isa, const ConvProblem& p, const uint16_t* src,
                        const uint16_t* diff_dst, WeightsView diff_w, int nthreads, int kind);
std::string describe_bwd_weights16(Isa isa, const ConvProblem& p, int nthreads, int kind,
                                   WeightsFormat wf);
// Reproducible reductions (SPEC 5: the same bits on every call and for any
// thread count). The backward-weights kernels cut their reduction (over
// pixels / rows / chunks) into this many pieces, a function of the problem
// alone, never of the thread count: each piece is summed in a fixed order
// into its own copy of the gradient (the first piece: the result, or one
// copy), whichever thread runs it, and the copies are added in piece order.
// At most kMaxReductionPieces, at most `units` (pieces of the reduction that
// are worth one each), and the extra copies within a quarter of the
// activations (or 512 KiB), so that summing them stays cheap; at least 1.
// act_floats: src + diff_dst elements; grad_floats: one gradient copy.
constexpr int kMaxReductionPieces = 8;
int reduction_pieces(double act_floats, double grad_floats, int64_t units);
// The pieces' copies of a run of len gradient elements summed in piece order:
// copy q (q < n, n >= 1) of element i at copies[q*ld_copy + i];
// dst[i*dst_stride] = copy 0 + copy 1 + ... + copy n-1, or += that sum when
// accumulate (dst already holds piece 0).
void sum_pieces(const float* copies, int64_t ld_copy, int n, int64_t len, float* dst,
                int64_t dst_stride, bool accumulate);

// Backward-data of a one-pixel src whose kernel covers diff_dst exactly, as
// dot products (planar_f32_common.cpp); dense NCX or (one group) NXC
// activations. False when the problem does not have that shape.
bool dense_backward_data_f32(Isa isa, const ConvProblem& p, const float* diff_dst, WeightsView w,
                             float* diff_src, int nthreads, bool channels_last);
// Planar (NCX) forward / backward-data over dense NCX activations, read and
// written in place (planar_f32_common.cpp). forward: in = src, out = dst,
// bias may be null; else in = diff_dst, out = diff_src, bias must be null.
bool planar_f32(Isa isa, const ConvProblem& p, bool forward, const float* in, WeightsView w,
                const float* bias, float* out, int nthreads);
// planar_f32 over dense NCX 16-bit activations (dt: bf16 or f16, in and out
// alike), widened where the kernels copy their rows and rounded once from
// the f32 results; weights and bias f32. Only the routes that copy every
// input row (direct-convolution tiles, depthwise backward-data rows,
// backward-data's im2col GEMMs), where planar_takes16 says so; false
// otherwise (the one-pixel routes read their rows in place).
bool planar_takes16(Isa isa, const ConvProblem& p, bool forward, int nthreads);
bool planar16(Isa isa, DType dt, const ConvProblem& p, bool forward, const void* in,
              WeightsView w, const float* bias, void* out, int nthreads);
// Whether planar_f32 cuts this problem into whole-plane items (small planes,
// many images x groups) rather than output rows.
bool planar_uses_planes(Isa isa, const ConvProblem& p, bool forward, int nthreads);
// Whether planar_f32's backward-data runs as GEMMs over im2col chunks.
bool planar_backward_data_gemm(Isa isa, const ConvProblem& p);
// Whether planar_f32's backward-data runs the depthwise rows (one channel per
// group on both sides); the same for every ISA.
bool planar_depthwise_backward_data(const ConvProblem& p);
// Whether planar_bwd_weights_f32 runs as GEMMs over im2col chunks (else dot tiles).
bool planar_bwd_weights_gemm(Isa isa, const ConvProblem& p);
// Planar backward-weights over dense NCX src / diff_dst (planar_f32_common.cpp).
bool planar_bwd_weights_f32(Isa isa, const ConvProblem& p, const float* src, const float* diff_dst,
                            WeightsView diff_w, int nthreads);
// planar_bwd_weights_f32 over dense NCX 16-bit src / diff_dst (dt: bf16 or
// f16), widened where the rows are copied (dot tiles: src and diff_dst
// rows; im2col GEMMs: the im2col gathers and each chunk's src rows); the
// gradient f32. planar_bwd_weights_takes16: whether the ISA has the kernels.
bool planar_bwd_weights_takes16(Isa isa);
bool planar_bwd_weights16(Isa isa, DType dt, const ConvProblem& p, const void* src,
                          const void* dy, WeightsView dw, int nthreads);
// Whether the planar kernels are expected to beat the channels-last ones plus
// the layout changes on this problem; amd: an AMD AVX-512 core (Zen 4 or 5,
// avx512_amd()), where the rule differs.
bool planar_preferred(Isa isa, const ConvProblem& p, Pass pass, bool amd);

// Each driver's plan for a problem, in one line of `key=value` fields (its
// kernel family, tile, blocking, schedule, packing, streaming, workspace),
// computed without running anything: what the driver's entry point above
// would do on this ISA with nthreads threads. The call plans
// (kernels/plan.h) embed them; the golden plan test compares them.
std::string describe_conv_f32(Isa isa, Pass pass, const ConvProblem& p, int nthreads);
// Backward-weights: for a gradient dense in layout wf (the plan depends on its strides).
std::string describe_bwd_weights_f32(Isa isa, const ConvProblem& p, int nthreads,
                                     WeightsFormat wf = WeightsFormat::XOI);
// dt: the activations' storage (planar16's bf16 / f16, forward and backward-data).
std::string describe_planar_f32(Isa isa, Pass pass, const ConvProblem& p, int nthreads,
                                DType dt = DType::F32);

}  // namespace x86
}  // namespace tct
