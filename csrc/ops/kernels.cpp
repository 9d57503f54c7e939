// CPU and Meta kernels of the graph:: ops: attributes and tensors -> resolved
// problem (problem.h) -> layouts and dtypes -> a kernel (kernels/).
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../kernels/dispatch.h"
#include "../kernels/kernels.h"
#include "../kernels/plan.h"
#include "../problem.h"
#include "common.h"
#include "ops.h"

namespace tct {
namespace ops {
namespace {

// Step 1 of issue #20: the plan is built once per call and the routes below
// still decide as before; every decision they take must be the plan's.
#define TCT_PLAN_CHECK(cond) \
  TORCH_INTERNAL_ASSERT(cond, "the call plan disagrees with the route taken: " #cond)

DType dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::F32;
    case at::kDouble: return DType::F64;
    case at::kBFloat16: return DType::BF16;
    case at::kHalf: return DType::F16;
    default: break;
  }
  TORCH_CHECK(false, "unreachable dtype");
}

ActView act_view(const Tensor& t, DataFormat f, int S) {
  auto dims = activation_dims(f, S);
  ActView v{t.data_ptr(), t.stride(dims[0]), t.stride(dims[1]), {0, 0, 0}};
  for (int i = 0; i < S; ++i) v.sx[kAxes - S + i] = t.stride(dims[2 + i]);
  return v;
}

WeightsView weights_view(const Tensor& t, WeightsFormat f, int S) {
  auto dims = weights_dims(f, S);
  WeightsView v{t.data_ptr(), t.stride(dims[0]), t.stride(dims[1]), {0, 0, 0}};
  for (int i = 0; i < S; ++i) v.sk[kAxes - S + i] = t.stride(dims[2 + i]);
  return v;
}

// Layout-change buffers, kept per calling thread and reused: a fresh large
// allocation is new pages every call, and faulting them in costs as much as
// the transpose itself. Slots keep the buffers of one call apart.
enum WorkspaceSlot { kInput = 0, kInput2 = 1, kOutput = 2, kSlots = 3 };

Tensor workspace(WorkspaceSlot slot, at::IntArrayRef sizes) {
  // ATen's CPU allocator aligns to 64 bytes, so channels-last rows of 16
  // floats are whole cache lines (a std::vector's 16-byte alignment splits
  // every 64-byte vector store across two lines).
  thread_local Tensor buffers[kSlots];
  Tensor& buf = buffers[slot];
  const int64_t n = c10::multiply_integers(sizes);
  if (!buf.defined() || buf.numel() < n) {
    buf = Tensor();  // free first: never hold the old and new buffers at once
    buf = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
  }
  return at::from_blob(buf.data_ptr<float>(), sizes, at::TensorOptions().dtype(at::kFloat));
}

// Dims of the channels-last order (N, X..., C) in the tensor's layout.
std::vector<int64_t> nxc_order(DataFormat f, int S) {
  auto dims = activation_dims(f, S);
  std::vector<int64_t> perm{dims[0]};
  for (int i = 0; i < S; ++i) perm.push_back(dims[2 + i]);
  perm.push_back(dims[1]);
  return perm;
}

// A dense NCX f32 tensor seen as (N, C, pixels): the case the fast transpose
// serves (ATen's permute-copy is several times slower for it).
bool is_dense_ncx(const Tensor& t, DataFormat f) {
  return f == DataFormat::NCX && t.scalar_type() == at::kFloat && t.is_contiguous();
}

// Input and result both dense NCX: what the planar kernels take in place.
bool dense_ncx_pair(const Tensor& in, const Tensor& out, DataFormat f) {
  return is_dense_ncx(in, f) && is_dense_ncx(out, f);
}

// Whether t's dims, taken in `order`, are contiguous: ATen's is_contiguous
// rule (sizes of 1 are skipped, an empty tensor is contiguous) without a view.
bool contiguous_in(const Tensor& t, const std::vector<int64_t>& order) {
  if (t.numel() == 0) return true;
  int64_t expected = 1;
  for (auto d = order.rbegin(); d != order.rend(); ++d) {
    const int64_t size = t.size(*d);
    if (size == 1) continue;
    if (t.stride(*d) != expected) return false;
    expected *= size;
  }
  return true;
}

ActLayout layout_of(const Tensor& t, DataFormat f) {
  return {contiguous_in(t, nxc_order(f, static_cast<int>(t.dim()) - 2)), is_dense_ncx(t, f)};
}

// The inputs of a call's plan: the ISA, the NCX path setting and the thread
// count are read here, once per call.
CallSpec call_spec(Pass pass, const ConvProblem& p, const Tensor& a, const Tensor& b,
                   DataFormat f) {
  CallSpec s;
  s.pass = pass;
  s.dtype = dtype_of(a.scalar_type());
  s.p = p;
  s.a = layout_of(a, f);
  s.b = layout_of(b, f);
  s.isa = active_isa();
  s.amd = avx512_amd();
  s.ncx_path = ncx_path();
  s.nthreads = at::get_num_threads();
  return s;
}

// torch_convtranspose.plans(): the frames open now, each collecting the plan
// lines of the calls made while it is open (process-wide).
struct PlanFrame {
  bool execute;
  std::vector<std::string> lines;
};
std::mutex g_plan_mutex;
std::vector<PlanFrame> g_plan_frames;
std::atomic<int> g_plan_depth{0};

bool verbose() {
  static const bool on = [] {
    const char* v = std::getenv("TORCH_CONVTRANSPOSE_VERBOSE");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return on;
}

// Prints the plan (TORCH_CONVTRANSPOSE_VERBOSE=1) and records it (plans());
// false: a dry run, the call returns its result uninitialized.
bool observe(const CallPlan& plan) {
  const bool print = verbose();
  if (!print && g_plan_depth.load(std::memory_order_acquire) == 0) return true;
  const std::string line = describe(plan);
  if (print) std::fprintf(stderr, "torch_convtranspose plan: %s\n", line.c_str());
  std::lock_guard<std::mutex> lock(g_plan_mutex);
  bool execute = true;
  for (PlanFrame& frame : g_plan_frames) {
    frame.lines.push_back(line);
    execute = execute && frame.execute;
  }
  return execute;
}

// The f32 activation as a dense channels-last (N, X..., C) tensor: a view when
// it already is one (NXC data, or NCX data in channels_last memory format).
Tensor dense_nxc(const Tensor& t, DataFormat f, WorkspaceSlot slot) {
  const int S = static_cast<int>(t.dim()) - 2;
  Tensor view = t.permute(nxc_order(f, S));
  if (view.is_contiguous() || !is_dense_ncx(t, f)) return view.contiguous();
  Tensor out = workspace(slot, view.sizes());
  const int64_t n = t.size(0), c = t.size(1);
  transpose_f32(t.data_ptr<float>(), out.data_ptr<float>(), n, c, n * c != 0 ? t.numel() / (n * c) : 0,
                at::get_num_threads());
  return out;
}

// A result in data_format layout computed through a channels-last buffer:
// writes straight into `out` when its NXC view is dense, else transposes back.
void through_nxc(const Tensor& out, DataFormat f, const std::function<bool(float*)>& run,
                 const std::function<void()>& fallback) {
  const int S = static_cast<int>(out.dim()) - 2;
  Tensor view = out.permute(nxc_order(f, S));
  if (view.is_contiguous()) {
    if (!run(view.data_ptr<float>())) fallback();
    return;
  }
  Tensor tmp = workspace(kOutput, view.sizes());
  if (!run(tmp.data_ptr<float>())) {
    fallback();
  } else if (is_dense_ncx(out, f)) {
    const int64_t n = out.size(0), c = out.size(1);
    transpose_f32(tmp.data_ptr<float>(), out.data_ptr<float>(), n, out.numel() / (n * c), c,
                  at::get_num_threads());
  } else {
    view.copy_(tmp);
  }
}

// A channels-last f32 kernel: (problem, input, output) -> handled?
using ChannelsLastKernel = std::function<bool(const ConvProblem&, const float*, float*)>;

// Runs a channels-last kernel for a result in data_format layout. NXC tensors
// go straight through. Dense NCX tensors are transposed in batch chunks of
// about a tenth of the batch (larger where the weights, packed again by each
// call, would dominate, and at least 2 MiB of activations), so the extra
// memory stays near 10 % of the tensors (or 2 MiB) and each chunk is still in
// cache when it is used. Anything else is copied
// through whole channels-last buffers.

void run_channels_last(const ConvProblem& p, DataFormat f, const Tensor& in, int64_t in_c,
                       int64_t in_pixels, const Tensor& out, int64_t out_c, int64_t out_pixels,
                       int64_t weights_numel, const ChannelsLastKernel& kernel,
                       const std::function<void()>& reference, bool forward,
                       const RouteStep& expect) {
  if (!dense_ncx_pair(in, out, f)) {
    TCT_PLAN_CHECK(expect.route == Route::Nxc);
    TCT_PLAN_CHECK(expect.a == (layout_of(in, f).nxc ? ToNxc::View
                                : is_dense_ncx(in, f) ? ToNxc::Transpose : ToNxc::Copy));
    TCT_PLAN_CHECK(expect.b == (layout_of(out, f).nxc ? ToNxc::View : ToNxc::Transpose));
    Tensor x = dense_nxc(in, f, kInput);
    through_nxc(out, f, [&](float* y) { return kernel(p, x.data_ptr<float>(), y); }, reference);
    return;
  }
  const int nt = at::get_num_threads();
  const int64_t in_image = in_c * in_pixels, out_image = out_c * out_pixels;
  // Each call packs the weights again: a chunk's activations must outweigh
  // them. Small tensors go in one chunk of up to 2 MiB (one L2): each call
  // has fixed costs (thread team, weight packing) that would dominate.
  const int64_t image = std::max<int64_t>(1, in_image + out_image);
  const int64_t amortized = (8 * weights_numel) / image + 1;
  const int64_t in_l2 = std::max<int64_t>(1, (int64_t{512} * 1024) / image);
  const int64_t chunk = std::min(p.N, std::max({(p.N + 9) / 10, amortized, in_l2}));
  // Few large images (one long 1D signal): a chunk of whole images would be
  // most of the tensors. Then each image goes in slabs of the outermost
  // axis with more than one output position, each slab's inputs (with the
  // rows its taps reach) and outputs transposed through buffers of about a
  // tenth of the tensors (at least 2 MiB, and 8x the weights, which every
  // call packs again).
  const int64_t total = p.N * image;
  const int64_t want = std::max({total / 10, 8 * weights_numel, int64_t{1} << 19});
  int sa = 0;  // slab axis
  {
    const auto& od = forward ? p.O : p.I;
    while (sa < kAxes - 1 && od[sa] == 1) ++sa;
  }
  const int64_t eo = forward ? p.O[sa] : p.I[sa];
  if (chunk * image > 2 * want && eo >= 2) {
    int64_t in_inner = 1, out_inner = 1;  // positions per step along the slab axis
    for (int b = sa + 1; b < kAxes; ++b) {
      in_inner *= forward ? p.I[b] : p.O[b];
      out_inner *= forward ? p.O[b] : p.I[b];
    }
    const int64_t rows = std::clamp<int64_t>(eo * want / image, 1, eo);
    const int64_t in_rows_max = forward ? (rows + 2 * p.K[sa] * p.d[sa]) / p.s[sa] + 2
                                        : rows * p.s[sa] + (p.K[sa] - 1) * p.d[sa] + 1;
    const int64_t in_e = forward ? p.I[sa] : p.O[sa];
    TCT_PLAN_CHECK(expect.route == Route::NcxSlabs && expect.axis == sa && expect.rows == rows);
    TCT_PLAN_CHECK(expect.buffer[kInput] == std::min(in_rows_max, in_e) * in_inner * in_c);
    TCT_PLAN_CHECK(expect.buffer[kOutput] == rows * out_inner * out_c);
    Tensor in_buf = workspace(kInput, {std::min(in_rows_max, in_e) * in_inner * in_c});
    Tensor out_buf = workspace(kOutput, {rows * out_inner * out_c});
    const float* x = in.data_ptr<float>();
    float* y = out.data_ptr<float>();
    for (int64_t n = 0; n < p.N; ++n)
      for (int64_t o0 = 0; o0 < eo; o0 += rows) {
        int64_t lo = 0;
        ConvProblem q = slab_problem(p, forward, sa, o0, std::min(eo, o0 + rows), &lo);
        q.N = 1;
        const int64_t qin = (forward ? q.I[sa] : q.O[sa]) * in_inner;
        const int64_t qout = (forward ? q.O[sa] : q.I[sa]) * out_inner;
        TORCH_INTERNAL_ASSERT(qin * in_c <= in_buf.numel() && qout * out_c <= out_buf.numel());
        transpose_f32(x + n * in_image + lo * in_inner, in_buf.data_ptr<float>(), 1, in_c, qin,
                      nt, in_pixels, in_image);
        if (!kernel(q, in_buf.data_ptr<float>(), out_buf.data_ptr<float>())) {
          reference();
          return;
        }
        transpose_f32(out_buf.data_ptr<float>(), y + n * out_image + o0 * out_inner, 1, qout,
                      out_c, nt, -1, -1, out_pixels, out_image);
      }
    return;
  }
  TCT_PLAN_CHECK(expect.route == Route::NcxChunks && expect.images == chunk);
  TCT_PLAN_CHECK(expect.buffer[kInput] == chunk * in_image &&
                 expect.buffer[kOutput] == chunk * out_image);
  Tensor in_buf = workspace(kInput, {chunk * in_image});
  Tensor out_buf = workspace(kOutput, {chunk * out_image});
  const float* x = in.data_ptr<float>();
  float* y = out.data_ptr<float>();
  for (int64_t n0 = 0; n0 < p.N; n0 += chunk) {
    ConvProblem q = p;
    q.N = std::min(chunk, p.N - n0);
    transpose_f32(x + n0 * in_image, in_buf.data_ptr<float>(), q.N, in_c, in_pixels, nt);
    if (!kernel(q, in_buf.data_ptr<float>(), out_buf.data_ptr<float>())) {
      reference();
      return;
    }
    transpose_f32(out_buf.data_ptr<float>(), y + n0 * out_image, q.N, out_pixels, out_c, nt);
  }
}

// A 1x1 kernel with strides (K = 1 on every axis, some s > 1): the same
// problem at src's resolution (stride 1, no padding, O = I), whose outputs are
// the strided problem's at o = i*s - pb (expand_strided_1x1_f32 writes the rest,
// the bias alone). Nothing for other problems.
std::optional<ConvProblem> strided_1x1_at_src(const ConvProblem& p) {
  if (p.taps() != 1) return std::nullopt;
  bool strided = false;
  for (int a = 0; a < kAxes; ++a) strided = strided || p.s[a] > 1;
  if (!strided) return std::nullopt;
  ConvProblem q = p;
  q.s = q.d = {1, 1, 1};
  q.pb = q.pe = q.op = {0, 0, 0};
  q.O = q.I;
  return q;
}

// Backward passes of a 1x1 kernel with strides above 1 on dense NCX tensors
// read diff_dst only at the positions i*s - pb, 1/prod(s) of it (at s = 2,
// every other element of every other row), which the channels-last path
// would transpose in full. When every src position lands inside diff_dst,
// those elements, gathered into a dense NCX tensor of src's spatial shape,
// make the same pass a 1x1 stride-1 problem. ResNet's 256 <- 512 1x1 s2 on
// 56x56 (26 MB), Zen 5: backward-data 1.12-1.2x, backward-weights 1.23x (not
// measured on Intel or AVX2-only CPUs). Below 2 MiB the gather's fixed costs
// outweigh it (a 0.75 MB 3D one ran 2x slower); channels-last tensors, which
// the kernels read in place at stride s, are left alone (the gather made them
// slower). Returns the problem the fast paths run and their diff_dst: the
// stride-1 form and the gathered tensor, or p and diff_dst themselves.
// `other` is the pass's other activation (diff_src, src), dense NCX too.
std::pair<ConvProblem, Tensor> as_stride_1(const ConvProblem& p, DataFormat f,
                                           const Tensor& diff_dst, const Tensor& other) {
  const std::optional<ConvProblem> q = strided_1x1_at_src(p);
  if (!q || !dense_ncx_pair(diff_dst, other, f) || diff_dst.numel() < (int64_t{1} << 19))
    return {p, diff_dst};
  for (int a = 0; a < kAxes; ++a) {
    const auto [lo, hi] = p.tap_src_range(a, 0);
    if (lo != 0 || hi != p.I[a]) return {p, diff_dst};
  }
  Tensor g = at::empty(dst_shape(*q, f), diff_dst.options());
  gather_strided_1x1_f32(p, diff_dst.data_ptr<float>(), g.data_ptr<float>(), at::get_num_threads());
  return {*q, g};
}

// Whether as_stride_1 gathers diff_dst for problem p (its conditions).
bool gathers_1x1(const ConvProblem& p, DataFormat f, const Tensor& diff_dst, const Tensor& other) {
  if (!strided_1x1_at_src(p) || !dense_ncx_pair(diff_dst, other, f) ||
      diff_dst.numel() < (int64_t{1} << 19))
    return false;
  for (int a = 0; a < kAxes; ++a) {
    const auto [lo, hi] = p.tap_src_range(a, 0);
    if (lo != 0 || hi != p.I[a]) return false;
  }
  return true;
}

// Backward-weights of dense NCX activations through channels-last buffers in
// pieces whose buffers stay in the caches while the kernels read them (the
// whole-tensor transposes wrote them to memory and read them back): batch
// chunks, or, for images of more than a piece, slabs of src rows along the
// outermost spatial axis of more than one position, each with the window of
// diff_dst its taps reach (a halo of (K-1)*d - s + 1 rows shared with the
// next slab; none where the kernel tiles diff_dst, K = s). The first piece's
// gradient goes to diff_w, each later one to a second copy that is added in,
// in piece order (at most one extra copy of the gradient). Pieces of 2 MiB of
// activations (4 MiB and more in all) while the pieces' gradient sums stay
// small next to them; else, when the whole-tensor transposes would exceed
// bwd_w_allowance() (issue #24: a 2 x 2**30 line transposed whole), larger
// pieces within half of it. The pieces, and whether this path runs at all,
// depend on the problem alone, not on the thread count: the bits are the same
// for any thread count (SPEC 5). False (diff_w not complete) where it does
// not apply.
//
// Extra memory a backward-weights call may spend on copies of the
// activations (their layout changes, the gathered diff_dst of a strided 1x1
// kernel): 10 % of the largest tensor, or two gradients' worth (gradient
// copies are allowed per thread; a constant, not the thread count, so that
// the route does not depend on it), at least 4 MiB. `whole`: the allowance
// for whole-tensor layout changes, eight gradients' worth instead of two,
// which stays bounded by the gradient, not by the batch or the line: cutting
// layers whose activations are a few gradients into pieces costs more than it
// saves, as each piece writes the whole gradient and adds it (the 3D U-Net
// 256 -> 128 k2 s2 on 8^3, 5 gradients of activations, ran 1.09x slower in
// four pieces, 1 thread, Xeon Sapphire Rapids).
double bwd_w_allowance(const ConvProblem& q, int64_t grad_numel, bool whole) {
  const double largest = 4.0 * std::max({static_cast<double>(q.N) * q.IC() * q.src_spatial(),
                                         static_cast<double>(q.N) * q.OC() * q.dst_spatial(),
                                         static_cast<double>(grad_numel)});
  return std::max({0.1 * largest, (whole ? 8.0 : 2.0) * 4.0 * grad_numel, 4.0 * (1 << 20)});
}

bool backward_weights_ncx_in_pieces(const ConvProblem& q, const Tensor& src, const Tensor& dd,
                                    const Tensor& diff_w, WeightsFormat wf, int nt,
                                    const RouteStep& expect) {
  constexpr double kPiece = 2.0 * (1 << 20);  // bytes of activations per piece
  const int64_t P = q.src_spatial(), Q = q.dst_spatial(), IC = q.IC(), OC = q.OC();
  const double image = 4.0 * static_cast<double>(IC * P + OC * Q);
  const double total = q.N * image, grad = 4.0 * diff_w.numel();
  int a = 0;  // outermost spatial axis with more than one src position
  while (a < kAxes - 1 && q.I[a] == 1) ++a;
  const bool can_slab = q.I[a] > 1;
  // How many pieces of `piece` bytes (batch chunks of imgs images, or slabs
  // of `rows` src rows along axis a).
  int64_t imgs = 1, rows = q.I[a], pieces = 0;
  auto cut = [&](double piece) {
    const bool slabs = image > piece;
    if (slabs && !can_slab) return false;
    imgs = slabs ? 1 : std::max<int64_t>(1, static_cast<int64_t>(piece / image));
    rows = slabs ? std::clamp<int64_t>(static_cast<int64_t>(q.I[a] * piece / image), 1, q.I[a])
                 : q.I[a];
    pieces = (q.N + imgs - 1) / imgs * ((q.I[a] + rows - 1) / rows);
    return pieces >= 2;
  };
  // Pieces of kPiece, their gradient sums within a quarter of the activations.
  bool ok = total >= 2 * kPiece && cut(kPiece) && grad * pieces <= 0.25 * total;
  if (!ok) {
    if (total <= bwd_w_allowance(q, diff_w.numel(), true)) {  // whole: within it
      TCT_PLAN_CHECK(expect.count == 0);
      return false;
    }
    // Larger pieces: as few gradient sums as fit in half the allowance.
    const double allowance = bwd_w_allowance(q, diff_w.numel(), false);
    ok = cut(std::clamp(16.0 * grad, kPiece, std::max(kPiece, 0.5 * allowance)));
  }
  TCT_PLAN_CHECK(ok == (expect.count > 0));
  if (!ok) return false;
  TCT_PLAN_CHECK(expect.axis == a && expect.images == imgs && expect.rows == rows &&
                 expect.count == pieces);
  int64_t in_inner = 1, out_inner = 1;  // positions per step along axis a
  for (int b = a + 1; b < kAxes; ++b) in_inner *= q.I[b], out_inner *= q.O[b];
  Tensor extra = at::empty_like(diff_w);
  const int S = q.spatial_rank;
  const float* x = src.data_ptr<float>();
  const float* y = dd.data_ptr<float>();
  const int64_t reach = (q.K[a] - 1) * q.d[a];  // diff_dst rows a src row's taps span, - 1
  bool first = true;
  for (int64_t n0 = 0; n0 < q.N; n0 += imgs)
    for (int64_t i0 = 0; i0 < q.I[a]; i0 += rows) {
      ConvProblem qp = q;
      qp.N = std::min(imgs, q.N - n0);
      int64_t o_lo = 0;
      if (rows < q.I[a]) {  // a slab and its diff_dst window [o_lo, o_hi) along axis a
        const int64_t nr = std::min(rows, q.I[a] - i0);
        o_lo = std::clamp<int64_t>(i0 * q.s[a] - q.pb[a], 0, q.O[a]);
        const int64_t o_hi =
            std::clamp<int64_t>((i0 + nr - 1) * q.s[a] - q.pb[a] + reach + 1, o_lo, q.O[a]);
        qp.I[a] = nr;
        qp.O[a] = o_hi - o_lo;
        qp.pb[a] = q.pb[a] + o_lo - i0 * q.s[a];  // >= 0: o_lo >= i0*s - pb
        // pe - op from O = (I-1)*s - pb - pe + reach + 1 + op
        const int64_t rest = (nr - 1) * q.s[a] - qp.pb[a] + reach + 1 - qp.O[a];
        qp.pe[a] = std::max<int64_t>(rest, 0);
        qp.op[a] = std::max<int64_t>(-rest, 0);
      }
      const int64_t pp = qp.src_spatial(), qq = qp.dst_spatial();
      {
        int64_t lo = 0;
        const ConvProblem pq = piece_problem(expect, n0, i0, &lo);
        TCT_PLAN_CHECK(lo == o_lo && pq.N == qp.N && pq.I == qp.I && pq.O == qp.O &&
                       pq.pb == qp.pb && pq.pe == qp.pe && pq.op == qp.op);
        TCT_PLAN_CHECK(std::max<int64_t>(1, qp.N * pp * IC) <= expect.buffer[kInput] &&
                       std::max<int64_t>(1, qp.N * qq * OC) <= expect.buffer[kInput2]);
      }
      Tensor xb = workspace(kInput, {std::max<int64_t>(1, qp.N * pp * IC)});
      Tensor yb = workspace(kInput2, {std::max<int64_t>(1, qp.N * qq * OC)});
      transpose_f32(x + n0 * IC * P + i0 * in_inner, xb.data_ptr<float>(), qp.N, IC, pp, nt, P,
                    IC * P);
      if (qq > 0)
        transpose_f32(y + n0 * OC * Q + o_lo * out_inner, yb.data_ptr<float>(), qp.N, OC, qq, nt,
                      Q, OC * Q);
      const Tensor& target = first ? diff_w : extra;
      if (!fast_backward_weights_f32(qp, xb.data_ptr<float>(), yb.data_ptr<float>(),
                                     weights_view(target, wf, S), nt))
        return false;
      if (!first) diff_w.add_(extra);
      first = false;
    }
  return true;
}

bool use_fast_f32(const Tensor& t) {
  return t.scalar_type() == at::kFloat && active_isa() != Isa::Reference;
}

}  // namespace

// ------------------------------------------------------------------ plans

void plans_begin(bool execute) {
  std::lock_guard<std::mutex> lock(g_plan_mutex);
  g_plan_frames.push_back({execute, {}});
  g_plan_depth.fetch_add(1, std::memory_order_release);
}

std::vector<std::string> plans_end() {
  std::lock_guard<std::mutex> lock(g_plan_mutex);
  TORCH_CHECK(!g_plan_frames.empty(), "plans_end: no plans_begin to close");
  std::vector<std::string> lines = std::move(g_plan_frames.back().lines);
  g_plan_frames.pop_back();
  g_plan_depth.fetch_sub(1, std::memory_order_release);
  return lines;
}

// ---------------------------------------------------------------- forward

Tensor conv_transpose_cpu(TCT_CONV_TRANSPOSE_ARGS) {
  auto plan = plan_forward(src, weights, bias, strides, pads_begin, pads_end, dilations, auto_pad,
                           output_padding, groups, data_format, weights_format);
  const ConvProblem& p = plan.p;
  const DataFormat df = plan.attrs.data_format;
  const int S = p.spatial_rank;
  Tensor dst = at::empty(dst_shape(p, df), src.options());
  const CallPlan cplan = make_call_plan(call_spec(Pass::Forward, p, src, dst, df));
  if (!observe(cplan)) return dst;
  TCT_PLAN_CHECK((dst.numel() == 0) == (cplan.step.route == Route::None));
  if (dst.numel() == 0) return dst;
  Tensor b = bias ? bias->contiguous() : Tensor();
  const int nt = at::get_num_threads();
  const WeightsView wv = weights_view(weights, plan.attrs.weights_format, S);
  auto reference = [&] {
    reference_forward(p, dtype_of(src.scalar_type()), act_view(src, df, S), wv,
                      b.defined() ? b.data_ptr() : nullptr, act_view(dst, df, S), nt);
  };
  TCT_PLAN_CHECK(use_fast_f32(src) == (cplan.step.route != Route::Reference));
  if (!use_fast_f32(src)) {
    reference();
    return dst;
  }
  const float* bias_ptr = b.defined() ? b.data_ptr<float>() : nullptr;
  if (dense_ncx_pair(src, dst, df) && use_planar(p, Pass::Forward)) {
    TCT_PLAN_CHECK(cplan.s1x1 == Strided1x1::None && cplan.step.route == Route::NcxPlanar);
    if (!fast_forward_ncx_f32(p, src.data_ptr<float>(), wv, bias_ptr, dst.data_ptr<float>(), nt))
      reference();
    return dst;
  }
  auto channels_last_kernel = [&](const ConvProblem& q, const float* x, float* y) {
    return fast_forward_f32(q, x, wv, bias_ptr, y, nt);
  };
  // A 1x1 kernel with strides on dense NCX tensors (ResNet's 1x1 s2
  // upsampling): computed at src's resolution (NCX, by the path its own
  // problem takes), then written out once, the positions between the strided
  // ones the bias alone. Channels-last, the whole output went through a buffer,
  // prod(s) - 1 of its positions only bias, and was transposed back. In batch
  // chunks of about a tenth of the batch: the buffer at src's resolution stays
  // within 10 % of the output.
  if (const auto q1 = strided_1x1_at_src(p);
      q1 && ncx_path() == NcxPath::Auto && dense_ncx_pair(src, dst, df)) {
    const int64_t chunk = (p.N + 9) / 10;
    TCT_PLAN_CHECK(cplan.s1x1 == Strided1x1::Expand && cplan.s1x1_images == chunk);
    bool ok = true;
    for (int64_t n0 = 0; n0 < p.N && ok; n0 += chunk) {
      ConvProblem qc = *q1, pc = p;
      qc.N = pc.N = std::min(chunk, p.N - n0);
      const RouteStep& expect = qc.N == chunk ? cplan.step : cplan.last;
      TCT_PLAN_CHECK(qc.N == chunk || cplan.has_last);
      TCT_PLAN_CHECK(expect.q.N == qc.N && dst_shape(qc, df) == dst_shape(expect.q, df));
      const Tensor x = src.narrow(0, n0, qc.N);
      Tensor y = workspace(kInput2, dst_shape(qc, df));
      TCT_PLAN_CHECK(use_planar(qc, Pass::Forward) == (expect.route == Route::NcxPlanar));
      if (use_planar(qc, Pass::Forward))
        ok = fast_forward_ncx_f32(qc, x.data_ptr<float>(), wv, bias_ptr, y.data_ptr<float>(), nt);
      else
        run_channels_last(qc, df, x, p.IC(), p.src_spatial(), y, p.OC(), p.src_spatial(),
                          weights.numel(), channels_last_kernel, [&] { ok = false; }, true,
                          expect);
      if (ok)
        expand_strided_1x1_f32(pc, y.data_ptr<float>(), bias_ptr,
                               dst.data_ptr<float>() + n0 * p.OC() * p.dst_spatial(), nt);
    }
    if (!ok) reference();
    return dst;
  }
  TCT_PLAN_CHECK(cplan.s1x1 == Strided1x1::None);
  run_channels_last(p, df, src, p.IC(), p.src_spatial(), dst, p.OC(), p.dst_spatial(),
                    weights.numel(), channels_last_kernel, reference, true, cplan.step);
  return dst;
}

Tensor conv_transpose_meta(TCT_CONV_TRANSPOSE_ARGS) {
  auto plan = plan_forward(src, weights, bias, strides, pads_begin, pads_end, dilations, auto_pad,
                           output_padding, groups, data_format, weights_format);
  return at::empty_symint(plan.result_shape, src.options());
}

// ---------------------------------------------------------- backward data

Tensor backward_data_cpu(TCT_BACKWARD_DATA_ARGS) {
  auto plan = plan_backward_data(diff_dst, weights, strides, pads_begin, pads_end, dilations,
                                 auto_pad, output_padding, groups, data_format, weights_format,
                                 src_shape);
  const ConvProblem& p = plan.p;
  const DataFormat df = plan.attrs.data_format;
  const int S = p.spatial_rank;
  Tensor diff_src = at::empty(tct::src_shape(p, df), diff_dst.options());
  const CallPlan cplan = make_call_plan(call_spec(Pass::BackwardData, p, diff_dst, diff_src, df));
  if (!observe(cplan)) return diff_src;
  TCT_PLAN_CHECK((diff_src.numel() == 0) == (cplan.step.route == Route::None));
  if (diff_src.numel() == 0) return diff_src;
  const int nt = at::get_num_threads();
  const WeightsView wv = weights_view(weights, plan.attrs.weights_format, S);
  auto reference = [&] {
    reference_backward_data(p, dtype_of(diff_dst.scalar_type()), act_view(diff_dst, df, S), wv,
                            act_view(diff_src, df, S), nt);
  };
  TCT_PLAN_CHECK(use_fast_f32(diff_dst) == (cplan.step.route != Route::Reference));
  if (!use_fast_f32(diff_dst)) {
    reference();
    return diff_src;
  }
  const auto [q, dy] = as_stride_1(p, df, diff_dst, diff_src);
  TCT_PLAN_CHECK((dy.data_ptr() != diff_dst.data_ptr()) == (cplan.s1x1 == Strided1x1::Gather));
  TCT_PLAN_CHECK(dst_shape(q, df) == dst_shape(cplan.step.q, df) && q.s == cplan.step.q.s);
  TCT_PLAN_CHECK((dense_ncx_pair(dy, diff_src, df) && use_planar(q, Pass::BackwardData)) ==
                 (cplan.step.route == Route::NcxPlanar));
  if (dense_ncx_pair(dy, diff_src, df) && use_planar(q, Pass::BackwardData)) {
    if (!fast_backward_data_ncx_f32(q, dy.data_ptr<float>(), wv, diff_src.data_ptr<float>(), nt))
      reference();
    return diff_src;
  }
  run_channels_last(
      q, df, dy, q.OC(), q.dst_spatial(), diff_src, q.IC(), q.src_spatial(),
      weights.numel(),
      [&](const ConvProblem& q, const float* dy, float* dx) {
        return fast_backward_data_f32(q, dy, wv, dx, nt);
      },
      reference, false, cplan.step);
  return diff_src;
}

Tensor backward_data_meta(TCT_BACKWARD_DATA_ARGS) {
  auto plan = plan_backward_data(diff_dst, weights, strides, pads_begin, pads_end, dilations,
                                 auto_pad, output_padding, groups, data_format, weights_format,
                                 src_shape);
  return at::empty_symint(plan.result_shape, diff_dst.options());
}

Tensor backprop_data(const Tensor& output_delta, const Tensor& filter, IntArrayRef strides,
                     IntArrayRef pads_begin, IntArrayRef pads_end, IntArrayRef dilations,
                     string_view auto_pad, IntArrayRef output_padding, int64_t groups,
                     string_view data_format, string_view filter_format,
                     at::OptionalSymIntArrayRef src_shape) {
  // Validate filter_format here so that its error names the argument.
  checked([&] { return parse_weights_format(std::string(filter_format), "filter_format"); });
  try {
    return call_backward_data(output_delta, filter, strides, pads_begin, pads_end, dilations,
                              auto_pad, output_padding, groups, data_format, filter_format,
                              src_shape);
  } catch (const c10::Error& e) {
    // Name this op's arguments: its errors come from conv_transpose_backward_data.
    TORCH_CHECK(false, "conv_transpose_backprop_data (output_delta is diff_dst, filter is "
                "weights, filter_format is weights_format): ", e.what_without_backtrace());
  }
}

// ------------------------------------------------------- backward weights

Tensor backward_weights_cpu(TCT_BACKWARD_WEIGHTS_ARGS) {
  auto plan = plan_backward_weights(src, diff_dst, weights_shape_input, strides, pads_begin,
                                    pads_end, dilations, auto_pad, output_padding, groups,
                                    data_format, weights_format, weights_shape);
  const ConvProblem& p = plan.p;
  const DataFormat df = plan.attrs.data_format;
  const int S = p.spatial_rank;
  Tensor diff_w = at::empty(tct::weights_shape(p, plan.attrs.weights_format), src.options());
  const CallPlan cplan =
      make_call_plan(call_spec(Pass::BackwardWeights, p, src, diff_dst, df));
  if (!observe(cplan)) return diff_w;
  TCT_PLAN_CHECK((diff_w.numel() == 0) == (cplan.step.route == Route::None));
  if (diff_w.numel() == 0) return diff_w;
  TCT_PLAN_CHECK(use_fast_f32(src) == (cplan.step.route != Route::Reference));
  const int nt = at::get_num_threads();
  const WeightsView wv = weights_view(diff_w, plan.attrs.weights_format, S);
  if (use_fast_f32(src)) {
    const WeightsFormat wf = plan.attrs.weights_format;
    // The fast routes for problem q on (x, dy), the gradient into target.
    auto run = [&](const ConvProblem& q, const Tensor& x, const Tensor& dy, const Tensor& target) {
      const WeightsView tv = weights_view(target, wf, S);
      const RouteStep& expect = q.N == cplan.step.q.N ? cplan.step : cplan.last;
      TCT_PLAN_CHECK(q.N == cplan.step.q.N || cplan.has_last);
      TCT_PLAN_CHECK(expect.q.N == q.N && expect.q.s == q.s && expect.q.O == q.O);
      TCT_PLAN_CHECK((dense_ncx_pair(x, dy, df) && use_planar(q, Pass::BackwardWeights)) ==
                     expect.planar);
      if (dense_ncx_pair(x, dy, df) && use_planar(q, Pass::BackwardWeights) &&
          fast_backward_weights_ncx_f32(q, x.data_ptr<float>(), dy.data_ptr<float>(), tv, nt))
        return true;
      if (dense_ncx_pair(x, dy, df) &&
          backward_weights_ncx_in_pieces(q, x, dy, target, wf, nt, expect))
        return true;
      TCT_PLAN_CHECK(expect.route == Route::Nxc);
      TCT_PLAN_CHECK(expect.a == (layout_of(x, df).nxc ? ToNxc::View
                                  : is_dense_ncx(x, df) ? ToNxc::Transpose : ToNxc::Copy));
      TCT_PLAN_CHECK(expect.b == (layout_of(dy, df).nxc ? ToNxc::View
                                  : is_dense_ncx(dy, df) ? ToNxc::Transpose : ToNxc::Copy));
      Tensor xc = dense_nxc(x, df, kInput), dyc = dense_nxc(dy, df, kInput2);
      return fast_backward_weights_f32(q, xc.data_ptr<float>(), dyc.data_ptr<float>(), tv, nt);
    };
    // A strided 1x1 kernel (as_stride_1) whose gathered diff_dst would
    // exceed bwd_w_allowance(): gathered in batch chunks within half of it,
    // each chunk's gradient added in chunk order (ResNet's 1x1 s2 keeps its
    // gather); where one image's gather is too large (long lines), not
    // gathered: the strided problem runs as it is (its pieces bound it).
    const double per_image = 4.0 * static_cast<double>(p.OC()) * p.src_spatial();
    const double allowance = bwd_w_allowance(p, diff_w.numel(), false);
    if (p.N * per_image > allowance && gathers_1x1(p, df, diff_dst, src)) {
      const ConvProblem q = *strided_1x1_at_src(p);
      const int64_t imgs = static_cast<int64_t>(0.5 * allowance / per_image);
      TCT_PLAN_CHECK((imgs >= 1) == (cplan.s1x1 == Strided1x1::GatherChunks));
      TCT_PLAN_CHECK(imgs < 1 || cplan.s1x1_images == imgs);
      bool ok = true;
      if (imgs >= 1) {
        Tensor extra = at::empty_like(diff_w);
        Tensor gbuf = at::empty({std::min(imgs, p.N) * q.OC() * q.dst_spatial()}, src.options());
        for (int64_t n0 = 0; n0 < p.N && ok; n0 += imgs) {
          ConvProblem pc = p, qc = q;
          pc.N = qc.N = std::min(imgs, p.N - n0);
          Tensor g = gbuf.narrow(0, 0, qc.N * q.OC() * q.dst_spatial()).view(dst_shape(qc, df));
          gather_strided_1x1_f32(pc, diff_dst.data_ptr<float>() + n0 * p.OC() * p.dst_spatial(),
                                 g.data_ptr<float>(), nt);
          ok = run(qc, src.narrow(0, n0, qc.N), g, n0 == 0 ? diff_w : extra);
          if (ok && n0 > 0) diff_w.add_(extra);
        }
      } else {
        ok = run(p, src, diff_dst, diff_w);
      }
      if (ok) return diff_w;
    } else {
      const auto [q, dd] = as_stride_1(p, df, diff_dst, src);
      TCT_PLAN_CHECK((dd.data_ptr() != diff_dst.data_ptr()) ==
                     (cplan.s1x1 == Strided1x1::Gather));
      if (run(q, src, dd, diff_w)) return diff_w;
    }
  }
  reference_backward_weights(p, dtype_of(src.scalar_type()), act_view(src, df, S),
                             act_view(diff_dst, df, S), wv, nt);
  return diff_w;
}

Tensor backward_weights_meta(TCT_BACKWARD_WEIGHTS_ARGS) {
  auto plan = plan_backward_weights(src, diff_dst, weights_shape_input, strides, pads_begin,
                                    pads_end, dilations, auto_pad, output_padding, groups,
                                    data_format, weights_format, weights_shape);
  return at::empty_symint(plan.result_shape, src.options());
}

}  // namespace ops
}  // namespace tct
