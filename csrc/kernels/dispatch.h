// Run-time choice of the kernel implementation from the CPU's features.
#pragma once

#include <string>

#include "kernels.h"

namespace tct {

// Avx512Bf16: the AVX-512 kernels for f32 and f16, and for bf16 the
// VDPBF16PS register tiles where they apply; Avx512Amx: the same with the AMX
// tiles (TDPBF16PS) for bf16. Avx512 on such a CPU is "no native bf16".
enum class Isa { Reference, Avx2, Avx512, Avx512Bf16, Avx512Amx };

const char* isa_name(Isa isa);
// Parses "reference", "avx2", "avx512", "avx512_bf16", "avx512_amx" (any
// case); throws ProblemError otherwise.
Isa parse_isa(const std::string& name);
// The vector ISA of the f32 kernels: Avx512 for Avx512Bf16 and Avx512Amx, else isa itself.
inline Isa vector_isa(Isa isa) {
  return isa == Isa::Avx512Amx || isa == Isa::Avx512Bf16 ? Isa::Avx512 : isa;
}
// The ISA of the native bf16 tiles that isa includes (Avx512Bf16,
// Avx512Amx), else Reference: bf16 then runs through the f32 kernels.
inline Isa bf16_isa(Isa isa) {
  return isa == Isa::Avx512Amx || isa == Isa::Avx512Bf16 ? isa : Isa::Reference;
}
// The best ISA this CPU supports (AVX-512 needs F/BW/VL/DQ; AVX2 needs FMA and
// F16C too; Avx512Bf16 needs AVX512_BF16 too; Avx512Amx needs AMX-TILE and
// AMX-BF16 (and AVX512_BF16, which every AMX CPU has) and the kernel's permission
// to use the tile data, asked once with arch_prctl on Linux).
Isa detected_isa();
bool isa_supported(Isa isa);
// PREFETCHW (CPUID 8000_0001h:ECX bit 8, "3DNowPrefetch"): AMD since K8,
// Intel since Broadwell. The tiles that prefetch lines for writing ask.
bool prefetchw_supported();
// The ISA in use: TORCH_CONVTRANSPOSE_ISA when set (read once), else detected_isa().
Isa active_isa();
// Forces an ISA for this process (tests, reproducibility); throws ProblemError
// naming the value when the CPU lacks it.
void set_active_isa(Isa isa);
// The CPU's microarchitecture, as far as a choice of ours was measured to
// depend on it (docs/heuristics.md, "On CPUs not measured"): AMD by CPUID
// family and model (Zen 2 and older: 17h; Zen 3: 19h models 00-0F, 20-5F;
// Zen 4: 19h models 10-1F, 60-7F, A0-AF; Zen 5: 1Ah and later), Intel by
// features (AMX: Sapphire Rapids and later server cores; AVX-512; the rest).
enum class Uarch { Generic, Intel, IntelAvx512, IntelAmx, Zen2, Zen3, Zen4, Zen5 };
const char* uarch_name(Uarch u);  // "generic", "intel", "intel_avx512", "intel_amx", "zen2", ...
Uarch parse_uarch(const std::string& name);  // any case; throws ProblemError naming the value
// The CPUID values the classification reads (family and model: the
// displayed ones, extended fields added), so that tests can fake them.
struct CpuidInfo {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ...
  unsigned family = 0, model = 0;
  bool avx512 = false, amx = false;  // isa_supported(Avx512), (Avx512Amx)
};
Uarch classify_uarch(const CpuidInfo& info);
CpuidInfo read_cpuid();  // this CPU's
// The uarch in use: set_uarch's, else TORCH_CONVTRANSPOSE_UARCH (read once),
// else classify_uarch(read_cpuid()). Forcing one runs that CPU's choices here
// (tests, and trying another CPU's rules); the plans read it once per call.
Uarch active_uarch();
void set_uarch(Uarch u);
// Whether the active uarch is an AMD core with full AVX-512 kernels of its
// own rule (Zen 4: 512-bit ops as two 256-bit halves; Zen 5, full width):
// the NCX path rule was measured to differ there from Intel's AVX-512 cores.
// Callers combine it with Isa::Avx512.
bool avx512_amd();
// Whether the AVX-512 one-vector tiles broadcast every input from memory,
// without in-lane permutes (heuristics K3): Intel's cores with AMX (Sapphire
// and Emerald Rapids: vpermilps takes one of the two 512-bit FMA ports, and two
// 512-bit loads issue a cycle), and `intel` (no AVX-512 detected: forced only).
// Not Intel's AVX-512 cores without AMX (Ice Lake-SP: about one 512-bit load a
// cycle, so the permutes, which save loads, win), nor AMD's or unknown vendors'.
inline bool avx512_broadcast_loads(Uarch u) { return u == Uarch::Intel || u == Uarch::IntelAmx; }

// How dense NCX (channels-first) f32 activations reach the kernels:
//   Auto:         the planar kernels where they are expected to win, else ChannelsLast;
//   Planar:       the planar kernels (forward / backward-data), in place;
//   ChannelsLast: transposed through channels-last buffers, in batch chunks.
// TORCH_CONVTRANSPOSE_NCX sets the initial choice ("auto", "planar", "channels_last").
enum class NcxPath { Auto, Planar, ChannelsLast };
const char* ncx_path_name(NcxPath path);
NcxPath parse_ncx_path(const std::string& name);  // any case; throws ProblemError
NcxPath ncx_path();
void set_ncx_path(NcxPath path);

enum class Pass { Forward, BackwardData, BackwardWeights };

// The register blocks of the f32 transpose for one ISA; null: scalar loops.
struct TransposeF32Kernels {
  void (*block16)(const float* src, int64_t ld_src, float* dst, int64_t ld_dst) = nullptr;
  void (*rows)(const float* src, int64_t ld_src, int nrows, int ncols, float* const* dst) =
      nullptr;
};
TransposeF32Kernels transpose_f32_kernels(Isa isa);

// Batched transpose: dst[b][j][i] = src[b][i][j] for i < rows, j < cols
// (both dense). Turns NCX (rows = C) into channels-last and back (rows = pixels).
// src_ld / src_batch: the source's row and batch strides, when not dense
// (default cols and rows * src_ld): e.g. a slab of each channel plane;
// dst_ld / dst_batch the same for the destination (default rows, cols * dst_ld).
void transpose_f32(const TransposeF32Kernels& k, const float* src, float* dst, int64_t batch,
                   int64_t rows, int64_t cols, int nthreads, int64_t src_ld = -1,
                   int64_t src_batch = -1, int64_t dst_ld = -1, int64_t dst_batch = -1);

// Forward of a 1x1 kernel with strides (K = 1 on every axis), dense NCX, from
// its values at src's resolution: y (N, OC, I...) holds, per src position i,
// the output at o = i*s - pb (bias included); every other output position is
// the bias alone (zero without bias). Writes all of dst (N, OC, O...).
void expand_strided_1x1_f32(const ConvProblem& p, const float* y, const float* bias, float* dst,
                            int nthreads);
// The converse gather for the backward passes of such a kernel when every src
// position lands inside diff_dst (pb = 0): dst (N, OC, I...) = diff_dst
// (N, OC, O...) at o = i*s.
void gather_strided_1x1_f32(const ConvProblem& p, const float* diff_dst, float* dst,
                            int nthreads);
// Channels-last diff_dst (N, O..., OC) of p at the positions g*j + r on each
// canonical axis (per axis g >= 1, 0 <= r < g), into dst (N, O'..., OC), dense,
// with O' = q.O: the diff_dst of the subsampled problem q (plan.cpp,
// subsampled_dst).
void subsample_nxc_f32(const ConvProblem& p, const ConvProblem& q,
                       const std::array<int64_t, kAxes>& g, const std::array<int64_t, kAxes>& r,
                       const float* diff_dst, float* dst, int nthreads);

}  // namespace tct
