// Execution of a call plan (plan.h): the layout changes between NCX and the
// channels-last buffers of the kernels, the strided 1x1 forms, the
// backward-weights pieces, the drivers (x86.h) and the reference. Reads only
// the plan: every route, size and ISA comes from it.
#include <algorithm>
#include <array>
#include <stdexcept>

#include "convert.h"
#include "plan.h"
#include "x86/conv_f32_kernels.h"
#include "x86/transpose.h"
#include "x86/x86.h"

namespace tct {
namespace {

const float* in_ptr(const ActView& v) { return static_cast<const float*>(v.data); }
float* out_ptr(const ActView& v) { return static_cast<float*>(v.data); }

// A buffer of this call only, released at the end of its scope.
class Temporary {
 public:
  Temporary(Workspace& ws, int64_t n) : ws_(ws), data_(ws.acquire(n)) {}
  ~Temporary() { ws_.release(data_); }
  Temporary(const Temporary&) = delete;
  Temporary& operator=(const Temporary&) = delete;
  float* get() const { return data_; }

 private:
  Workspace& ws_;
  float* data_;
};

// What the route functions share during one call.
struct Ctx {
  const CallPlan& plan;
  const CallArgs& args;
  Workspace& ws;

  Isa isa() const { return plan.spec.isa; }
  int nt() const { return plan.spec.nthreads; }
  bool forward() const { return plan.spec.pass == Pass::Forward; }
  const float* bias() const { return static_cast<const float*>(args.bias); }
  void transpose(const float* src, float* dst, int64_t batch, int64_t rows, int64_t cols,
                 int64_t src_ld = -1, int64_t src_batch = -1, int64_t dst_ld = -1,
                 int64_t dst_batch = -1) const {
    transpose_f32(plan.transpose, src, dst, batch, rows, cols, nt(), src_ld, src_batch, dst_ld,
                  dst_batch);
  }
};

// The channels-last kernel of the pass (forward or backward-data) on dense
// channels-last x and y.
bool channels_last_kernel(const Ctx& c, const ConvProblem& q, const float* x, float* y) {
  if (c.forward()) return x86::forward_f32(c.isa(), q, x, c.args.w, c.bias(), y, c.nt());
  return x86::backward_data_f32(c.isa(), q, x, c.args.w, y, c.nt());
}

// Route::Nxc (forward, backward-data): the input viewed or transposed into a
// buffer, the result written in place or through a buffer transposed back.
bool run_nxc(const Ctx& c, const RouteStep& st, const float* in, float* out) {
  const auto [in_c, in_pixels, out_c, out_pixels] = conv_sides(c.forward(), st.q);
  const float* x = in;
  if (st.a == ToNxc::Transpose) {
    float* buf = c.ws.buffer(kInput, st.buffer[kInput]);
    c.transpose(in, buf, st.q.N, in_c, in_pixels);
    x = buf;
  }
  float* y = st.b == ToNxc::View ? out : c.ws.buffer(kOutput, st.buffer[kOutput]);
  if (!channels_last_kernel(c, st.q, x, y)) return false;
  if (st.b == ToNxc::Transpose) c.transpose(y, out, st.q.N, out_pixels, out_c);
  return true;
}

// Route::NcxChunks: batch chunks of dense NCX in and out, each transposed
// into a channels-last buffer and back.
bool run_chunks(const Ctx& c, const RouteStep& st, const float* x, float* y) {
  const ConvProblem& p = st.q;
  const auto [in_c, in_pixels, out_c, out_pixels] = conv_sides(c.forward(), p);
  const int64_t in_image = in_c * in_pixels, out_image = out_c * out_pixels;
  float* in_buf = c.ws.buffer(kInput, st.buffer[kInput]);
  float* out_buf = c.ws.buffer(kOutput, st.buffer[kOutput]);
  for (int64_t n0 = 0; n0 < p.N; n0 += st.images) {
    ConvProblem q = p;
    q.N = std::min(st.images, p.N - n0);
    c.transpose(x + n0 * in_image, in_buf, q.N, in_c, in_pixels);
    if (!channels_last_kernel(c, q, in_buf, out_buf)) return false;
    c.transpose(out_buf, y + n0 * out_image, q.N, out_pixels, out_c);
  }
  return true;
}

// Route::NcxSlabs: each image in slabs of st.rows kernel outputs along
// st.axis, each slab's inputs (with the rows its taps reach) and outputs
// transposed through the buffers.
bool run_slabs(const Ctx& c, const RouteStep& st, const float* x, float* y) {
  const ConvProblem& p = st.q;
  const SlabSides g = slab_sides(p, c.forward());  // (its axis: st.axis, the same rule)
  float* in_buf = c.ws.buffer(kInput, st.buffer[kInput]);
  float* out_buf = c.ws.buffer(kOutput, st.buffer[kOutput]);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t o0 = 0; o0 < g.eo; o0 += st.rows) {
      int64_t lo = 0;
      const ConvProblem q = g.slab(p, o0, st.rows, &lo);
      const int64_t qin = g.in_positions(q), qout = g.out_positions(q);
      if (g.axis != st.axis || qin * g.in_c > st.buffer[kInput] ||
          qout * g.out_c > st.buffer[kOutput])
        throw std::logic_error("run_slabs: a slab outgrows the plan's buffers");
      c.transpose(x + g.in_offset(n, lo, false), in_buf, 1, g.in_c, qin, g.in_pixels);
      if (!channels_last_kernel(c, q, in_buf, out_buf)) return false;
      c.transpose(out_buf, y + g.out_offset(n, o0, false), 1, qout, g.out_c, -1, -1,
                  g.out_pixels);
    }
  return true;
}

// A forward or backward-data step from `in` to `out` (dense NCX unless Nxc).
bool run_conv_step(const Ctx& c, const RouteStep& st, const float* in, float* out) {
  switch (st.route) {
    case Route::NcxPlanar:
      return x86::planar_f32(c.isa(), st.q, c.forward(), in, c.args.w,
                             c.forward() ? c.bias() : nullptr, out, c.nt());
    case Route::Nxc: return run_nxc(c, st, in, out);
    case Route::NcxChunks: return run_chunks(c, st, in, out);
    case Route::NcxSlabs: return run_slabs(c, st, in, out);
    default: return false;
  }
}

// Strided1x1::Expand: each batch chunk computed at src's resolution into a
// buffer (by its step), then written out at the strided positions, the
// positions between them the bias alone.
bool run_expand(const Ctx& c) {
  const ConvProblem& p = c.plan.spec.p;
  const int64_t chunk = c.plan.s1x1_images;
  for (int64_t n0 = 0; n0 < p.N; n0 += chunk) {
    const RouteStep& st = p.N - n0 < chunk ? c.plan.last : c.plan.step;
    ConvProblem pc = p;
    pc.N = st.q.N;
    float* y = c.ws.buffer(kInput2, st.q.N * p.OC() * p.src_spatial());
    if (!run_conv_step(c, st, in_ptr(c.args.a) + n0 * p.IC() * p.src_spatial(), y)) return false;
    expand_strided_1x1_f32(pc, y, c.bias(), out_ptr(c.args.b) + n0 * p.OC() * p.dst_spatial(),
                           c.nt());
  }
  return true;
}

bool run_forward(const Ctx& c) {
  if (c.plan.s1x1 == Strided1x1::Expand) return run_expand(c);
  return run_conv_step(c, c.plan.step, in_ptr(c.args.a), out_ptr(c.args.b));
}

bool run_backward_data(const Ctx& c) {
  if (c.plan.s1x1 == Strided1x1::Subsample) {
    Temporary g(c.ws, c.plan.s1x1_floats);
    subsample_nxc_f32(c.plan.spec.p, c.plan.step.q, c.plan.sub_g, c.plan.sub_r, in_ptr(c.args.a),
                      g.get(), c.nt());
    return run_conv_step(c, c.plan.step, g.get(), out_ptr(c.args.b));
  }
  if (c.plan.s1x1 != Strided1x1::Gather)
    return run_conv_step(c, c.plan.step, in_ptr(c.args.a), out_ptr(c.args.b));
  Temporary g(c.ws, c.plan.s1x1_floats);
  gather_strided_1x1_f32(c.plan.spec.p, in_ptr(c.args.a), g.get(), c.nt());
  return run_conv_step(c, c.plan.step, g.get(), out_ptr(c.args.b));
}

// ------------------------------------------------------- backward weights

// diff_w += extra, both dense with the same strides (n elements).
void add_gradient(const WeightsView& w, const float* extra, int64_t n, int nt) {
  float* out = static_cast<float*>(w.data);
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= 32768)
  for (int64_t i = 0; i < n; ++i) out[i] += extra[i];
}

WeightsView with_data(WeightsView w, float* data) {
  w.data = data;
  return w;
}

// Route::NcxPieces: each piece's src and diff_dst window transposed into the
// buffers, its gradient into target (the first) or a second copy added in,
// in piece order.
bool run_pieces(const Ctx& c, const RouteStep& st, const float* x, const float* y,
                const WeightsView& target) {
  const ConvProblem& q = st.q;
  const int a = st.axis;
  const int64_t P = q.src_spatial(), Q = q.dst_spatial(), IC = q.IC(), OC = q.OC();
  int64_t in_inner = 1, out_inner = 1;  // positions per step along axis a
  for (int b = a + 1; b < kAxes; ++b) in_inner *= q.I[b], out_inner *= q.O[b];
  Temporary extra(c.ws, c.plan.grad_floats);
  bool first = true;
  for (int64_t n0 = 0; n0 < q.N; n0 += st.images)
    for (int64_t i0 = 0; i0 < q.I[a]; i0 += st.rows) {
      int64_t o_lo = 0;
      const ConvProblem qp = piece_problem(st, n0, i0, &o_lo);
      const int64_t pp = qp.src_spatial(), qq = qp.dst_spatial();
      float* xb = c.ws.buffer(kInput, std::max<int64_t>(1, qp.N * pp * IC));
      float* yb = c.ws.buffer(kInput2, std::max<int64_t>(1, qp.N * qq * OC));
      c.transpose(x + n0 * IC * P + i0 * in_inner, xb, qp.N, IC, pp, P, IC * P);
      if (qq > 0) c.transpose(y + n0 * OC * Q + o_lo * out_inner, yb, qp.N, OC, qq, Q, OC * Q);
      const WeightsView w = first ? target : with_data(target, extra.get());
      if (!x86::backward_weights_f32(c.isa(), qp, xb, yb, w, c.nt())) return false;
      if (!first) add_gradient(target, extra.get(), c.plan.grad_floats, c.nt());
      first = false;
    }
  return true;
}

// Route::Nxc (backward-weights): src into kInput, diff_dst into kInput2
// where they are dense NCX (viewed where channels-last).
bool run_bwd_weights_nxc(const Ctx& c, const RouteStep& st, const float* x, const float* y,
                         const WeightsView& target) {
  const ConvProblem& q = st.q;
  if (st.a == ToNxc::Transpose) {
    float* buf = c.ws.buffer(kInput, q.N * q.IC() * q.src_spatial());
    c.transpose(x, buf, q.N, q.IC(), q.src_spatial());
    x = buf;
  }
  if (st.b == ToNxc::Transpose) {
    float* buf = c.ws.buffer(kInput2, q.N * q.OC() * q.dst_spatial());
    c.transpose(y, buf, q.N, q.OC(), q.dst_spatial());
    y = buf;
  }
  return x86::backward_weights_f32(c.isa(), q, x, y, target, c.nt());
}

// A backward-weights step on (src x, diff_dst y), the gradient into target:
// the planar kernels, then pieces, then channels-last, each where the plan
// has it and the one before declined.
bool run_bwd_weights_step(const Ctx& c, const RouteStep& st, const float* x, const float* y,
                          const WeightsView& target) {
  if (st.planar && x86::planar_bwd_weights_f32(c.isa(), st.q, x, y, target, c.nt())) return true;
  if (st.count > 0 && run_pieces(c, st, x, y, target)) return true;
  return run_bwd_weights_nxc(c, st, x, y, target);
}

// Strided1x1::GatherChunks: diff_dst gathered a batch chunk at a time, each
// chunk's gradient added in chunk order.
bool run_gather_chunks(const Ctx& c) {
  const ConvProblem& p = c.plan.spec.p;
  const int64_t imgs = c.plan.s1x1_images;
  Temporary extra(c.ws, c.plan.grad_floats);
  Temporary g(c.ws, c.plan.s1x1_floats);
  for (int64_t n0 = 0; n0 < p.N; n0 += imgs) {
    const RouteStep& st = p.N - n0 < imgs ? c.plan.last : c.plan.step;
    ConvProblem pc = p;
    pc.N = st.q.N;
    gather_strided_1x1_f32(pc, in_ptr(c.args.b) + n0 * p.OC() * p.dst_spatial(), g.get(),
                           c.nt());
    const WeightsView target = n0 == 0 ? c.args.w : with_data(c.args.w, extra.get());
    if (!run_bwd_weights_step(c, st, in_ptr(c.args.a) + n0 * p.IC() * p.src_spatial(), g.get(),
                              target))
      return false;
    if (n0 > 0) add_gradient(c.args.w, extra.get(), c.plan.grad_floats, c.nt());
  }
  return true;
}

bool run_backward_weights(const Ctx& c) {
  switch (c.plan.s1x1) {
    case Strided1x1::GatherChunks: return run_gather_chunks(c);
    case Strided1x1::Gather: {
      Temporary g(c.ws, c.plan.s1x1_floats);
      gather_strided_1x1_f32(c.plan.spec.p, in_ptr(c.args.b), g.get(), c.nt());
      return run_bwd_weights_step(c, c.plan.step, in_ptr(c.args.a), g.get(), c.args.w);
    }
    default:
      return run_bwd_weights_step(c, c.plan.step, in_ptr(c.args.a), in_ptr(c.args.b), c.args.w);
  }
}

// ------------------------------------------------------ 16-bit (Convert16)

// Elements of the span a weights view covers (strides are not negative).
int64_t weights_span(const ConvProblem& p, const WeightsView& w) {
  if (p.IC() * p.OCg * p.taps() == 0) return 0;
  int64_t span = 1 + (p.IC() - 1) * w.si + (p.OCg - 1) * w.so;
  for (int a = 0; a < kAxes; ++a) span += (p.K[a] - 1) * w.sk[a];
  return span;
}

// A dense activation of c channels and spatial sizes x, channels
// last (nxc) or NCX, at data.
ActView dense_view(void* data, int64_t c, const std::array<int64_t, kAxes>& x, bool nxc) {
  const int64_t pixels = x[0] * x[1] * x[2];
  ActView v{data, c * pixels, nxc ? 1 : pixels, {0, 0, 0}};
  int64_t step = nxc ? c : 1;
  for (int a = kAxes - 1; a >= 0; --a) {
    v.sx[a] = step;
    step *= x[a];
  }
  return v;
}

uint16_t* bits16(void* p) { return static_cast<uint16_t*>(p); }

// The 16-bit transpose kernels of a call's vector ISA (AVX-512: the pair
// tiles' routes and ncx16; AVX2: ncx16): the 32 x 32 block, and on AVX-512
// the 2-4 row one. Every 16-bit layout change takes its kernels from here.
Transpose16Kernels u16_kernels(Isa isa) {
  if (isa == Isa::Avx2) return {x86::transpose_u16_block32_avx2};
  return {x86::transpose_u16_block32_avx512, x86::transpose_u16_few_avx512};
}

// n images of the 16-bit activation a, dense NCX, into channels-last at dst;
// and n images of a 16-bit channels-last result y into b's dense NCX at dst
// (the pair tiles' and ncx16's chunks).
void a_chunk_to_nxc16(const Ctx& c, const uint16_t* a, uint16_t* dst, int64_t n) {
  const CallSpec& s = c.plan.spec;
  const ActSides sd = act_sides(s.pass, s.p);
  transpose_u16(a, dst, n, sd.a_c, sd.a_pixels(), s.nthreads, u16_kernels(s.isa));
}

void b_chunk_to_ncx16(const Ctx& c, const uint16_t* y, uint16_t* dst, int64_t n) {
  const CallSpec& s = c.plan.spec;
  const ActSides sd = act_sides(s.pass, s.p);
  transpose_u16(y, dst, n, sd.b_pixels(), sd.b_c, s.nthreads, u16_kernels(s.isa));
}

// Images [n0, n0 + n) of a Convert16 plan on the pair tiles: the bf16 activation a,
// dense channels-last (read in place) or NCX (transposed into abuf first),
// the call's bf16 weights and the f32 bias of `in`; the result rounded once: by the tiles
// (pairs_out16) straight into b, or into bbuf as f32 and narrowed; NCX
// results through channels-last bf16 (bbuf, or b16 after narrowing),
// transposed into b. (The pairs driver does not decline: the plan checked it.)
void run_pairs_chunk(const Ctx& c, int64_t n0, int64_t n, const CallArgs& in, float* abuf,
                   float* bbuf) {
  const CallSpec& s = c.plan.spec;
  const Convert16Plan& cv = c.plan.convert;
  ConvProblem q = s.p;
  q.N = n;
  const ActSides sd = act_sides(s.pass, s.p);
  const uint16_t* a = bits16(c.args.a.data) + n0 * sd.a_image();
  uint16_t* const b = bits16(c.args.b.data) + n0 * sd.b_image();
  if (cv.pairs_ncx) {
    a_chunk_to_nxc16(c, a, bits16(abuf), n);
    a = bits16(abuf);
  }
  // The tiles' result: bf16 straight into b (channels-last, pairs_out16), else
  // into bbuf (f32, or NCX's channels-last bf16).
  const bool to_b = cv.pairs_out16 && !cv.pairs_ncx;
  void* const y = to_b ? static_cast<void*>(b) : static_cast<void*>(bbuf);
  const bool ok =
      c.forward()
          ? x86::forward_bf16_pairs(s.bf16, q, a, c.args.w, static_cast<const float*>(in.bias), y,
                                    cv.pairs_out16, s.nthreads, to_b)
          : x86::backward_data_bf16_pairs(s.bf16, q, a, c.args.w, y, cv.pairs_out16, s.nthreads,
                                          to_b);
  if (!ok) throw std::logic_error("convert16: the pairs plan declined a problem it applied to");
  const int64_t nb = n * sd.b_image();
  if (!cv.pairs_ncx) {
    if (!cv.pairs_out16) narrow_from_f32(s.isa, s.dtype, bbuf, b, nb, s.nthreads);
    return;
  }
  uint16_t* y16 = bits16(bbuf);
  if (!cv.pairs_out16) {
    y16 = bits16(c.ws.buffer(kOutput, std::max<int64_t>(1, cv.b16_floats)));
    narrow_from_f32(s.isa, s.dtype, bbuf, y16, nb, s.nthreads);
  }
  b_chunk_to_ncx16(c, y16, b, n);
}

// Backward-weights of a Convert16 plan on the pair tiles: src in CNX order in abuf
// (from channels-last data, or ATen's copy: one transpose; from NCX: its
// planes moved), diff_dst as channels-last (in place, or transposed from
// NCX into bbuf), the bf16 gradient into grad (each sum rounded once).
void run_pairs_bww(const Ctx& c, float* abuf, float* bbuf, float* scratch, WeightsView grad) {
  const CallSpec& s = c.plan.spec;
  const ActSides sd = act_sides(s.pass, s.p);
  const int64_t a_pix = sd.a_pixels(), b_pix = sd.b_pixels();
  const uint16_t* a = bits16(c.args.a.data);
  const uint16_t* b = bits16(c.args.b.data);
  if (c.plan.spec.a.ncx) {
    ncx_to_cnx_u16(a, bits16(abuf), s.p.N, sd.a_c, a_pix, s.nthreads);
  } else {  // (N*X, C) -> (C, N*X)
    transpose_u16(a, bits16(abuf), 1, s.p.N * a_pix, sd.a_c, s.nthreads, u16_kernels(s.isa));
  }
  a = bits16(abuf);
  if (bbuf) {
    transpose_u16(b, bits16(bbuf), s.p.N, sd.b_c, b_pix, s.nthreads, u16_kernels(s.isa));
    b = bits16(bbuf);
  }
  if (!x86::backward_weights_bf16_pairs(s.bf16, s.p, a, b, grad, scratch, s.nthreads))
    throw std::logic_error("convert16: the pairs plan declined a problem it applied to");
}

// Convert16Plan's slabs on the pair tiles: a dense NCX slab transposed into 16-bit
// channels-last (abuf), or channels-last read in place; the tiles' result
// (16-bit, or f32 narrowed) transposed into b's NCX slab, or narrowed into
// b in place. The call's bf16 weights, its f32 bias.
bool run_pairs_slabs(const Ctx& c, const CallArgs& in) {
  const CallSpec& s = c.plan.spec;
  const Convert16Plan& cv = c.plan.convert;
  const ConvProblem& p = s.p;
  const bool forward = c.forward(), ncx = cv.pairs_ncx;
  const SlabSides g = slab_sides(p, forward);
  const int64_t in_c = g.in_c, out_c = g.out_c;
  const Transpose16Kernels kern = u16_kernels(s.isa);
  uint16_t* const abuf = ncx ? bits16(c.ws.buffer(kWideA, cv.a_floats)) : nullptr;
  float* const bbuf = c.ws.buffer(kWideB, std::max<int64_t>(1, cv.b_floats));
  uint16_t* const b16buf = cv.b16_floats ? bits16(c.ws.buffer(kOutput, cv.b16_floats)) : nullptr;
  const uint16_t* const a16 = bits16(c.args.a.data);
  uint16_t* const b16 = bits16(c.args.b.data);
  const float* bias = static_cast<const float*>(in.bias);
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t o0 = 0; o0 < g.eo; o0 += cv.rows) {
      int64_t lo = 0;
      const ConvProblem q = g.slab(p, o0, cv.rows, &lo);
      const int64_t qin = g.in_positions(q), qout = g.out_positions(q);
      const uint16_t* a = a16 + g.in_offset(n, lo, !ncx);
      if (ncx) {
        transpose_u16(a, abuf, 1, in_c, qin, s.nthreads, kern, g.in_pixels);
        a = abuf;
      }
      uint16_t* const b = b16 + g.out_offset(n, o0, !ncx);
      const bool ok = forward ? x86::forward_bf16_pairs(s.bf16, q, a, c.args.w, bias, bbuf,
                                                        cv.pairs_out16, s.nthreads)
                              : x86::backward_data_bf16_pairs(s.bf16, q, a, c.args.w, bbuf,
                                                              cv.pairs_out16, s.nthreads);
      if (!ok) return false;  // (the plan checked the first, an inner and the last slab)
      const uint16_t* y16 = bits16(bbuf);
      if (!cv.pairs_out16) {
        uint16_t* const dst = ncx ? b16buf : b;
        narrow_from_f32(s.isa, s.dtype, bbuf, dst, qout * out_c, s.nthreads);
        y16 = dst;
      }
      if (ncx) transpose_u16(y16, b, 1, qout, out_c, s.nthreads, kern, -1, g.out_pixels);
    }
  return true;
}

// Convert16Plan's slabs: each image in slabs along cv.axis; a slab's inputs
// widened into channels-last f32 (NCX: widened per channel into kInput,
// then transposed), the channels-last kernels on the slab's problem, the
// result rounded into b (the GEMM tiles round it themselves where they
// apply to the slab and b is channels-last; else from f32, NCX through a
// transpose into kOutput). w and bias: the call's f32 copies.
bool run_convert16_slabs(const Ctx& c, const CallArgs& in) {
  const CallSpec& s = c.plan.spec;
  const Convert16Plan& cv = c.plan.convert;
  const ConvProblem& p = s.p;
  const bool forward = c.forward(), ncx_a = !s.a.nxc, ncx_b = !s.b.nxc;
  const SlabSides g = slab_sides(p, forward);
  const int64_t in_c = g.in_c, out_c = g.out_c;
  const int out16 = kind16(s.dtype);
  float* const abuf = cv.planar ? nullptr : c.ws.buffer(kWideA, cv.a_floats);
  float* bbuf = cv.planar || cv.direct16 ? nullptr : c.ws.buffer(kWideB, cv.b_floats);
  float* const a_ncx = ncx_a ? c.ws.buffer(kInput, cv.a_floats) : nullptr;
  float* const b_ncx = ncx_b ? c.ws.buffer(kOutput, cv.b_floats) : nullptr;
  const uint16_t* const a16 = bits16(c.args.a.data);
  uint16_t* const b16 = bits16(c.args.b.data);
  std::shared_ptr<const x86::PreparedConv> prepared;
  std::array<int64_t, 3> prepared_key{};
  for (int64_t n = 0; n < p.N; ++n)
    for (int64_t o0 = 0; o0 < g.eo; o0 += cv.rows) {
      int64_t lo = 0;
      const ConvProblem q = g.slab(p, o0, cv.rows, &lo);
      const int64_t qin = g.in_positions(q), qout = g.out_positions(q);
      if (qin * in_c > cv.a_floats || (!cv.direct16 && qout * out_c > cv.b_floats))
        throw std::logic_error("convert16: a slab outgrows the plan's buffers");
      const uint16_t* a = a16 + g.in_offset(n, lo, !ncx_a);
      uint16_t* const b = b16 + g.out_offset(n, o0, !ncx_b);
      auto narrow_ncx = [&] {  // channel runs of qout positions
        narrow_rows_from_f32(s.isa, s.dtype, b_ncx, qout, b, g.out_pixels, out_c, qout,
                             s.nthreads);
      };
      if (ncx_a) {  // channel runs of qin positions
        widen_rows_to_f32(s.isa, s.dtype, a, g.in_pixels, a_ncx, qin, in_c, qin, s.nthreads);
        if (cv.planar) {
          if (!x86::planar_f32(s.isa, q, forward, a_ncx, in.w,
                               forward ? static_cast<const float*>(in.bias) : nullptr, b_ncx,
                               s.nthreads))
            return false;
          narrow_ncx();
          continue;
        }
        c.transpose(a_ncx, abuf, 1, in_c, qin);  // (C, X) -> (X, C)
      } else {
        widen_to_f32(s.isa, s.dtype, a, abuf, qin * in_c, s.nthreads);
      }
      // The slabs between the first and the last share one problem: one plan.
      const std::array<int64_t, 3> key{q.I[g.axis], q.O[g.axis], q.pb[g.axis]};
      if (!prepared || key != prepared_key) {
        prepared = x86::prepare_conv_f32(s.isa, s.pass, q, in.w, ncx_b ? 0 : out16, s.nthreads);
        prepared_key = key;
      }
      const float* bias = static_cast<const float*>(in.bias);
      const bool direct = x86::prepared_out16(*prepared);
      // (A slab the plan expected to round in the tiles but that does not:
      // its f32 result needs a buffer after all.)
      if (!direct && !bbuf) bbuf = c.ws.buffer(kWideB, qout * out_c);
      if (!x86::run_prepared_conv(*prepared, abuf, in.w, bias, direct ? static_cast<void*>(b)
                                                                     : static_cast<void*>(bbuf)))
        return false;
      if (direct) continue;
      if (ncx_b) {  // (X, C) -> (C, X)
        c.transpose(bbuf, b_ncx, 1, qout, out_c);
        narrow_ncx();
      } else {
        narrow_from_f32(s.isa, s.dtype, bbuf, b, qout * out_c, s.nthreads);
      }
    }
  return true;
}

// Route::Convert16 (plan.h): batch chunks widened into f32 buffers of the
// tensors' own dense layout, each run by its f32 plan; results rounded once.
bool run_convert16(const Ctx& c) {
  const CallSpec& s = c.plan.spec;
  const Convert16Plan& cv = c.plan.convert;
  const ConvProblem& p = s.p;
  const bool bww = s.pass == Pass::BackwardWeights;
  const ActSides sd = act_sides(s.pass, p);
  const int64_t a_img = sd.a_image(), b_img = sd.b_image();
  auto widen = [&](const void* src, float* dst, int64_t n) {
    widen_to_f32(s.isa, s.dtype, src, dst, n, s.nthreads);
  };
  float* const abuf = cv.a_floats ? c.ws.buffer(kWideA, cv.a_floats) : nullptr;
  float* const bbuf = cv.b_floats ? c.ws.buffer(kWideB, cv.b_floats) : nullptr;
  // Weights widened once (forward, backward-data; on the pair tiles not: the tiles'
  // packing reads the bf16 weights), or the f32 gradient and a second copy
  // for the later chunks (backward-weights: the result is dense; on the pair
  // tiles, which write the bf16 gradient, their scratch); then the bias.
  const int64_t wn = bww ? cv.w_floats : cv.pairs ? 0 : weights_span(p, c.args.w);
  const int64_t bias_n = c.args.bias ? p.OC() : 0;
  float* const wbuf =
      c.ws.buffer(kWideW, std::max<int64_t>(1, (bww && !cv.pairs ? 2 * wn : wn) + bias_n));
  CallArgs in;
  in.w = with_data(c.args.w, wbuf);
  // direct16 (not in slabs): the GEMM packing may widen the 16-bit weights as
  // it reads them (heuristics A15); the f32 copy is made only where a chunk's
  // plan asks for it.
  const bool defer_w = cv.direct16 && !cv.slabs;
  bool widened = false;
  auto f32_weights = [&]() -> const void* {
    if (!widened) widen(c.args.w.data, wbuf, wn);
    widened = true;
    return wbuf;
  };
  if (!bww && !cv.pairs && !defer_w) f32_weights();
  if (c.args.bias) {
    widen(c.args.bias, wbuf + wn, bias_n);
    in.bias = wbuf + wn;
  }
  if (cv.slabs) return cv.pairs ? run_pairs_slabs(c, in) : run_convert16_slabs(c, in);
  if (bww && (cv.planar16 || cv.bww16)) {  // the whole call into the f32 gradient, rounded once
    in.w.data = wbuf;
    const bool ok =
        cv.planar16 ? x86::planar_bwd_weights16(s.isa, s.dtype, p, c.args.a.data, c.args.b.data,
                                                in.w, s.nthreads)
                    : x86::backward_weights16(s.isa, p, bits16(c.args.a.data),
                                              bits16(c.args.b.data), in.w, s.nthreads,
                                              kind16(s.dtype));
    if (!ok) return false;
    narrow_from_f32(s.isa, s.dtype, wbuf, c.args.w.data, wn, s.nthreads);
    return true;
  }
  if (cv.planar16)
    return x86::planar16(s.isa, s.dtype, p, c.forward(), c.args.a.data, in.w,
                         static_cast<const float*>(in.bias), c.args.b.data, s.nthreads);
  if (bww && cv.pairs) {
    run_pairs_bww(c, abuf, bbuf, wbuf, c.args.w);
    return true;
  }
  for (int64_t k = 0; k < cv.chunks; ++k) {
    const int64_t n0 = k * cv.images, n = std::min(cv.images, p.N - n0);
    if (cv.pairs) {
      run_pairs_chunk(c, n0, n, in, abuf, bbuf);
    } else if (cv.direct16) {
      ConvProblem q = p;
      q.N = n;
      const void* a = bits16(c.args.a.data) + n0 * a_img;  // in16: read as it is
      // ncx16: the chunk's a as 16-bit channels-last, its result through bbuf.
      uint16_t* const b16 = cv.ncx16 ? bits16(bbuf) : bits16(c.args.b.data) + n0 * b_img;
      if (cv.ncx16) {
        uint16_t* const a16 = bits16(c.ws.buffer(kInput, cv.a16_floats));
        a_chunk_to_nxc16(c, static_cast<const uint16_t*>(a), a16, n);
        a = a16;
      }
      if (!cv.in16) {
        widen(a, abuf, n * a_img);
        a = abuf;
      }
      const bool ok =
          cv.wide16
              ? x86::conv_f32_wide16(s.isa, s.pass, q, static_cast<const float*>(a), c.args.w,
                                     static_cast<const float*>(in.bias), bbuf, kind16(s.dtype),
                                     s.nthreads, widen_fn(s.isa, s.dtype), f32_weights)
              : x86::conv_f32_out16(s.isa, s.pass, q, a, cv.in16, c.args.w,
                                    static_cast<const float*>(in.bias), b16, kind16(s.dtype),
                                    s.nthreads, !cv.ncx16, widen_fn(s.isa, s.dtype), f32_weights);
      if (!ok)
        throw std::logic_error("convert16: the f32 plan declined a 16-bit route it applied to");
      if (cv.ncx16)
        b_chunk_to_ncx16(c, b16, bits16(c.args.b.data) + n0 * b_img, n);
    } else {
      // The f32 buffers in the layouts the chunks' f32 plans were made for.
      const CallPlan& f32 = n == cv.images ? *cv.full : *cv.last;
      widen(bits16(c.args.a.data) + n0 * a_img, abuf, n * a_img);
      in.a = dense_view(abuf, sd.a_c, sd.a_x, cv.full->spec.a.nxc);
      in.b = dense_view(bbuf, sd.b_c, sd.b_x, cv.full->spec.b.nxc);
      if (bww) {
        widen(bits16(c.args.b.data) + n0 * b_img, bbuf, n * b_img);
        in.w.data = k == 0 ? wbuf : wbuf + wn;
      }
      execute(f32, in, c.ws);
    }
    if (bww && k > 0) add_gradient(with_data(c.args.w, wbuf), wbuf + wn, wn, s.nthreads);
    if (!bww && !cv.pairs && (!cv.direct16 || cv.wide16))
      narrow_from_f32(s.isa, s.dtype, bbuf, bits16(c.args.b.data) + n0 * b_img, n * b_img,
                      s.nthreads);
  }
  if (bww) narrow_from_f32(s.isa, s.dtype, wbuf, c.args.w.data, wn, s.nthreads);
  return true;
}

bool run_route(const Ctx& c) {
  if (c.plan.step.route == Route::Convert16) return run_convert16(c);
  switch (c.plan.spec.pass) {
    case Pass::Forward: return run_forward(c);
    case Pass::BackwardData: return run_backward_data(c);
    case Pass::BackwardWeights: return run_backward_weights(c);
  }
  return false;
}

void run_reference(const CallPlan& plan, const CallArgs& args) {
  const CallSpec& s = plan.spec;
  switch (s.pass) {
    case Pass::Forward:
      reference_forward(s.p, s.dtype, args.a, args.w, args.bias, args.b, s.nthreads);
      break;
    case Pass::BackwardData:
      reference_backward_data(s.p, s.dtype, args.a, args.w, args.b, s.nthreads);
      break;
    case Pass::BackwardWeights:
      reference_backward_weights(s.p, s.dtype, args.a, args.b, args.w, s.nthreads);
      break;
  }
}

}  // namespace

void execute(const CallPlan& plan, const CallArgs& args, Workspace& ws) {
  if (plan.step.route == Route::None) return;
  bool ok = false;
  if (plan.step.route != Route::Reference) {
    const Ctx c{plan, args, ws};
    ok = run_route(c);
  }
  if (!ok) run_reference(plan, args);
}

}  // namespace tct
