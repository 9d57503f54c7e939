// The plan of one call: every route decision, made once per call from the
// problem, the pass, the dtype, the activations' layouts, the CPU's ISA (read
// once by the caller), the NCX path setting (read once) and the thread count.
// Executing a plan (routes.cpp) reads only the plan: it never asks for the ISA
// or the NCX path again, so a concurrent set_isa cannot mix one ISA's rules
// with another's kernels. No torch headers: the caller (ops/) hands down the
// tensors as element-strided views and its buffers through Workspace.
//
//   CallPlan plan = make_call_plan(spec);   // pure, cheap
//   describe(plan);                         // one line
//   execute(plan, args, workspace);         // the layout changes and the kernels
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "dispatch.h"
#include "kernels.h"

namespace tct {

// An activation's memory as the kernels see it: dense channels-last (the
// (N, X..., C) order contiguous), dense NCX (an f32 tensor in NCX data format,
// contiguous), both (one channel or one pixel), or neither (other strides).
struct ActLayout {
  bool nxc = false;
  bool ncx = false;
};

// The activations of a call: a and b are (src, dst) for the forward,
// (diff_dst, diff_src) for backward-data, (src, diff_dst) for backward-weights.
struct CallSpec {
  Pass pass = Pass::Forward;
  DType dtype = DType::F32;
  ConvProblem p;
  ActLayout a, b;
  Isa isa = Isa::Reference;  // make_call_plan keeps vector_isa() here and sets bf16
  // The ISA of the bf16 pair tiles (bf16_isa(): Avx512Amx, Avx512Bf16) that
  // bf16 may run on; Reference: none, bf16 runs through the f32 kernels.
  Isa bf16 = Isa::Reference;
  // avx512_amd(): an AMD core, whose AVX-512 kernels have their own NCX rule
  // and whose VDPBF16PS tiles pay (pairs_pay in plan.cpp)
  bool amd = false;
  NcxPath ncx_path = NcxPath::Auto;
  int nthreads = 1;
  // The weights' layout: backward-weights' driver plan follows the
  // gradient's strides; the other passes' plans do not read it (benchmark
  // mode keys every pass's choices by it).
  WeightsFormat weights = WeightsFormat::XOI;
};

enum class Route : uint8_t {
  None,       // empty result: nothing to compute
  Reference,  // plain loops over any strides (other dtypes, no fast ISA)
  Nxc,        // the channels-last kernels; activations viewed, transposed or copied
  NcxPlanar,  // the planar kernels, on dense NCX tensors in place
  NcxChunks,  // the channels-last kernels through transposed batch chunks
  NcxSlabs,   // the channels-last kernels through transposed slabs of one image
  NcxPieces,  // backward-weights: channels-last pieces, their gradients added in order
  Convert16,  // bf16 / f16: batch chunks converted to f32, run by an f32 plan, rounded once
};

// How an activation reaches the channels-last kernels on Route::Nxc.
enum class ToNxc : uint8_t {
  View,       // dense channels-last already: read or written in place
  Transpose,  // dense NCX: through a per-thread buffer, transposed
  Copy,       // other strides: made dense channels-last by the caller before execute()
};

// The per-thread buffers a call uses (Workspace::buffer): the layout changes'
// (kInput, kInput2, kOutput) and Route::Convert16's f32 copies (kWideA,
// kWideB: a chunk's activations; kWideW: the weights or the gradients).
enum WorkspaceSlot {
  kInput = 0, kInput2 = 1, kOutput = 2, kRouteSlots = 3,
  kWideA = 3, kWideB = 4, kWideW = 5, kSlots = 6
};

// One problem on one route: the call's, or one batch chunk's of a strided 1x1 form.
struct RouteStep {
  Route route = Route::Reference;
  ConvProblem q;  // the problem the route runs
  ToNxc a = ToNxc::View, b = ToNxc::View;  // Route::Nxc (and backward-weights' fallback)
  bool planar = false;  // backward-weights: the planar kernels first, then pieces, then Nxc
  // NcxChunks: images per chunk and chunks; NcxSlabs: the slab axis, kernel
  // outputs (rows) per slab and slabs per image; NcxPieces: images and src
  // rows along `axis` per piece and the pieces (rows < I[axis]: slabs), also
  // on a backward-weights NcxPlanar step (its fallback; count 0: none).
  int axis = 0;
  int64_t images = 0, rows = 0, count = 0;
  int64_t buffer[kRouteSlots] = {0, 0, 0};  // floats of each per-thread buffer (largest request)
};

// The strided 1x1 forms (K = 1 on every axis, some s > 1) on dense NCX tensors.
enum class Strided1x1 : uint8_t {
  None,
  Expand,        // forward: at src's resolution in batch chunks, then expanded
  Gather,        // backward passes: diff_dst gathered whole, run as stride 1
  GatherChunks,  // backward-weights: gathered in batch chunks, gradients added in order
  Subsample,     // backward-data: channels-last diff_dst at the positions every tap reads
                 // (CallPlan::sub_g, sub_r), gathered dense, run with s / g and d / g
};

struct CallPlan;

// The kind of a 16-bit storage as the kernels take it (ConvTileArgs::out16,
// the in16 / kind arguments of x86.h): 1 bf16, 2 f16.
inline int kind16(DType dt) { return dt == DType::F16 ? 2 : 1; }

// Route::Convert16: 16-bit activations (dense, NCX or channels-last) go
// through the f32 kernels a batch chunk at a time: the chunk is widened into
// an f32 buffer of the same layout, the f32 plan of the chunk runs on it, and
// its result is rounded once to the 16-bit output (forward, backward-data).
// Backward-weights sums the chunks' f32 gradients in chunk order and rounds
// the total once. Weights (and bias) are widened once per call, except with
// direct16 where the GEMM packing widens the 16-bit weights as it reads them
// (x86::conv_f32_out16's w16, heuristics A15).
//
// With spec.bf16 (bf16 forward / backward-data, channels-last activations,
// a problem the pair tiles of that ISA take: x86::conv_bf16_pairs_info), a
// is not widened: the pair tiles (AMX or VDPBF16PS) read the chunk's bf16 in
// place (pairs = true, no f32 plans) and write its result: rounded to bf16
// by the tiles (pairs_out16: a reduction in one chunk, straight into b, no
// f32 buffer), else in f32, rounded once as above. Dense NCX activations
// (pairs_ncx) go through 16-bit channels-last copies of the chunk
// (transposed, not widened).
struct Convert16Plan {
  int64_t images = 0, chunks = 0;  // images per chunk, chunks
  bool pairs = false, pairs_out16 = false, pairs_ncx = false;
  // Not the pair tiles: the f32 GEMM tiles round a channels-last result into b themselves
  // (x86::conv_f32_out16; no f32 plans kept).
  bool direct16 = false;
  // direct16 where the GEMM plan needs several reduction chunks: the f32
  // result of a chunk in b_floats, rounded into b after it; the 16-bit
  // weights packed as read all the same (x86::conv_f32_wide16; no f32 copy
  // of the weights).
  bool wide16 = false;
  // direct16 on dense NCX a and b (AVX-512): each chunk's a transposed into a
  // 16-bit channels-last copy (a16_floats, kInput), read by the tiles (in16)
  // or widened from there, the 16-bit result into a channels-last buffer
  // (b_floats, kWideB) and transposed into b: two 16-bit transposes instead of
  // widening, two f32 transposes and narrowing.
  bool ncx16 = false;
  int64_t a16_floats = 0;
  // direct16 on depthwise or dot tiles that also read a's 16-bit channels-last
  // elements themselves, widening as they load: the whole call at once
  // (images = N), no f32 copies of the activations.
  bool in16 = false;
  // Backward-weights on channels-last 16-bit src and diff_dst read by the f32
  // driver itself (x86::backward_weights16: its packing or its tiles on pixel
  // lists widen the rows), into
  // the f32 gradient (w_floats), rounded once: the whole call, no f32 copies
  // of the activations.
  bool bww16 = false;
  int64_t a_floats = 0, b_floats = 0;  // f32 buffer of a chunk's a and b (pairs: see run_pairs_chunk)
  int64_t b16_floats = 0;  // pairs, NCX, f32 result: its 16-bit channels-last copy
  int64_t w_floats = 0;  // f32 weights (their span), or one f32 gradient copy
  std::shared_ptr<const CallPlan> full, last;  // f32 plans of a full chunk, of the last (or null)
  // Slabs (forward / backward-data; images = 1): an image too large for
  // the copies' budget goes in slabs of `rows` kernel outputs along `axis`
  // (SlabSides), `slabs` per image. Not pairs: the slab's inputs (with the rows
  // its taps reach) widened into channels-last f32 (a_floats; NCX through
  // kInput first), the channels-last f32 kernels, the result rounded into b
  // (direct16 where the tiles round it, else through b_floats of f32, NCX
  // through kOutput); no f32 plans kept (full: null). With dense NCX
  // activations where the planar kernels are preferred (use_planar), the
  // slabs run them instead: widened per channel into a_floats, the result
  // into b_floats, both NCX (no transposes). Pairs: as run_pairs_chunk per slab
  // (a_floats, b_floats, b16_floats: a slab's).
  int axis = -1;
  int64_t rows = 0, slabs = 0;
  bool planar = false;
  // Dense NCX forward / backward-data where the planar kernels are preferred
  // and their route copies every input row (x86::planar_takes16): the whole
  // call runs them on the 16-bit tensors, widened as the rows are copied and
  // rounded from the f32 results (images = N, one chunk, no f32 copies of
  // the activations). Backward-weights likewise where the planar kernels run
  // (x86::planar_bwd_weights_takes16), into the f32 gradient (w_floats),
  // rounded once.
  bool planar16 = false;
};

struct CallPlan {
  CallSpec spec;  // the inputs (spec.p: the call's problem)
  TransposeF32Kernels transpose;  // the layout changes' register blocks (spec.isa's)
  // Inputs with other strides that the route reads channels-last: the caller
  // hands them to execute() as dense channels-last copies (ops/: ATen's).
  bool copy_a = false, copy_b = false;
  Strided1x1 s1x1 = Strided1x1::None;
  int64_t s1x1_images = 0, s1x1_chunks = 0;  // Expand / GatherChunks: images per chunk, chunks
  int64_t s1x1_floats = 0;  // floats of the chunk's buffer at src's resolution (or the gather)
  // Subsample: per canonical axis, diff_dst's positions g*j + r are the ones read.
  std::array<int64_t, kAxes> sub_g{1, 1, 1}, sub_r{0, 0, 0};
  RouteStep step;       // the whole (or gathered) problem, or each full chunk's
  RouteStep last;       // the last chunk's, when it has fewer images (has_last)
  bool has_last = false;
  int64_t grad_floats = 0;  // backward-weights: one gradient copy (pieces, chunks)
  Convert16Plan convert;    // Route::Convert16
};

// Pure and cheap (no allocation beyond the plan).
CallPlan make_call_plan(const CallSpec& spec);
// One line, space-separated key=value fields in a stable order, each route
// step with the describe_* line of the driver it runs (x86.h) in braces.
std::string describe(const CallPlan& plan);
// The first fields of describe(): the spec alone (pass, dtype, layouts, ISA,
// vendor flag, NCX path, threads, problem).
std::string describe_spec(const CallSpec& spec);

// --- execution (routes.cpp) ---

// The buffers a call needs beyond its tensors, from the caller (ops/: ATen's
// allocator, so that they are 64-byte aligned and counted like its tensors).
class Workspace {
 public:
  // At least n floats of the calling thread's buffer `slot`, kept for later
  // calls (a fresh large allocation is new pages every call, and faulting
  // them in costs as much as a transpose); valid until `slot` is asked again.
  virtual float* buffer(WorkspaceSlot slot, int64_t n) = 0;
  // n floats for this call only (a gathered diff_dst, a gradient copy), until release().
  virtual float* acquire(int64_t n) = 0;
  virtual void release(float* data) = 0;

 protected:
  ~Workspace() = default;
};

// The tensors of a call: a and b as in CallSpec (copies where copy_a /
// copy_b: dense channels-last), w the weights, or for backward-weights
// diff_w (dense: plan.grad_floats elements). The result (b, or diff_w) is written.
struct CallArgs {
  ActView a, b;
  WeightsView w;
  const void* bias = nullptr;  // forward, may be null; of the call's dtype
};

// Runs the plan: the route, the reference where a kernel declines (returns
// false), nothing for Route::None.
void execute(const CallPlan& plan, const CallArgs& args, Workspace& ws);

// --- shared by the plan and its execution (one source of truth each) ---

// Channels and positions per image of the tensor the channels-last kernels
// read (in) and write (out): (src, dst) for the forward, (diff_dst, diff_src)
// for backward-data.
struct ConvSides {
  int64_t in_c, in_pixels, out_c, out_pixels;
};
ConvSides conv_sides(bool forward, const ConvProblem& q);

// The activations a and b of a pass (CallSpec): channels and spatial sizes.
struct ActSides {
  int64_t a_c, b_c;
  std::array<int64_t, kAxes> a_x, b_x;
  int64_t a_pixels() const { return a_x[0] * a_x[1] * a_x[2]; }  // positions per image
  int64_t b_pixels() const { return b_x[0] * b_x[1] * b_x[2]; }
  int64_t a_image() const { return a_c * a_pixels(); }  // elements per image
  int64_t b_image() const { return b_c * b_pixels(); }
};
ActSides act_sides(Pass pass, const ConvProblem& p);

// A 1x1 kernel with strides (K = 1 on every axis, some s > 1): the same
// problem at src's resolution (stride 1, no padding, O = I), whose outputs are
// the strided problem's at o = i*s - pb. False for other problems.
bool strided_1x1_at_src(const ConvProblem& p, ConvProblem* at_src);
// The part of problem p (forward or backward-data) that computes the kernel's
// outputs [o0, o1) along axis a, and the first input row it reads (*lo).
ConvProblem slab_problem(const ConvProblem& p, bool forward, int a, int64_t o0, int64_t o1,
                         int64_t* lo);
// One image in slabs along its outermost axis with more than one kernel
// output (the 16-bit routes' slabs): that axis, its outputs, each side's
// channels, positions per image and per step along the axis.
struct SlabSides {
  int axis = 0;
  int64_t eo = 0;
  int64_t in_c = 0, in_pixels = 0, out_c = 0, out_pixels = 0, in_inner = 1, out_inner = 1;
  bool forward = true;
  // The slab of outputs [o0, o0 + rows) (N = 1; slab_problem), *lo its
  // first input row; its input and output positions.
  ConvProblem slab(const ConvProblem& p, int64_t o0, int64_t rows, int64_t* lo) const;
  int64_t in_positions(const ConvProblem& q) const;
  int64_t out_positions(const ConvProblem& q) const;
  // Element offsets in dense tensors (NCX, or channels-last where nxc) of
  // image n's input row lo and output row o0 along the axis.
  int64_t in_offset(int64_t n, int64_t lo, bool nxc) const {
    return n * in_c * in_pixels + lo * in_inner * (nxc ? in_c : 1);
  }
  int64_t out_offset(int64_t n, int64_t o0, bool nxc) const {
    return n * out_c * out_pixels + o0 * out_inner * (nxc ? out_c : 1);
  }
};
SlabSides slab_sides(const ConvProblem& p, bool forward);
// Backward-weights piece (n0, i0) of a NcxPieces step: its problem and the
// first diff_dst row of its window along step.axis (*o_lo).
ConvProblem piece_problem(const RouteStep& step, int64_t n0, int64_t i0, int64_t* o_lo);

}  // namespace tct
