// The call plan (plan.h): the route rules of every pass, in one place, with
// the measurements that justify them. routes.cpp executes what they decide.
#include "plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "x86/x86.h"

namespace tct {
namespace {

constexpr double kF32 = sizeof(float);  // bytes per element

// Input and result both dense NCX: what the planar kernels take in place.
bool dense_ncx_pair(ActLayout a, ActLayout b) { return a.ncx && b.ncx; }

// A dense NCX tensor of n images of c channels and `pixels` positions (a batch
// chunk of one, a gathered diff_dst): dense channels-last too when one of them
// is 1 or it is empty.
ActLayout dense_ncx(int64_t n, int64_t c, int64_t pixels) {
  return {n * c * pixels == 0 || c == 1 || pixels == 1, true};
}
// The same for a dense channels-last one (a subsampled diff_dst).
ActLayout dense_nxc(int64_t n, int64_t c, int64_t pixels) {
  return {true, n * c * pixels == 0 || c == 1 || pixels == 1};
}

ToNxc to_nxc(ActLayout l) { return l.nxc ? ToNxc::View : l.ncx ? ToNxc::Transpose : ToNxc::Copy; }

int64_t weights_floats(const ConvProblem& q) { return q.IC() * q.OCg * q.taps(); }

// Whether the NCX path setting sends this pass of a dense NCX problem to the
// planar kernels.
bool use_planar(const CallSpec& s, const ConvProblem& q, Pass pass) {
  switch (s.ncx_path) {
    case NcxPath::Planar: return true;
    case NcxPath::ChannelsLast: return false;
    case NcxPath::Auto: break;
  }
  return x86::planar_preferred(s.isa, q, pass, s.amd);
}

// Channels-last kernels for a result in data_format layout (forward or
// backward-data). NXC tensors go straight through. Dense NCX tensors are
// transposed in batch chunks of about a tenth of the batch (larger where the
// weights, packed again by each call, would dominate, and at least 2 MiB of
// activations), so the extra memory stays near 10 % of the tensors (or 2 MiB)
// and each chunk is still in cache when it is used. Anything else is copied
// through whole channels-last buffers.
RouteStep channels_last_step(const CallSpec& s, const ConvProblem& q, ActLayout a, ActLayout b) {
  const bool forward = s.pass == Pass::Forward;
  const auto [in_c, in_pixels, out_c, out_pixels] = conv_sides(forward, q);
  const int64_t in_image = in_c * in_pixels, out_image = out_c * out_pixels;
  RouteStep st;
  st.q = q;
  if (!dense_ncx_pair(a, b)) {
    st.route = Route::Nxc;
    st.a = to_nxc(a);
    st.b = to_nxc(b);
    if (st.a == ToNxc::Transpose) st.buffer[kInput] = q.N * in_image;
    if (st.b == ToNxc::Transpose) st.buffer[kOutput] = q.N * out_image;
    return st;
  }
  const int64_t weights_numel = weights_floats(q);
  // Each call packs the weights again: a chunk's activations must outweigh
  // them. Small tensors go in one chunk of up to 2 MiB (one L2): each call
  // has fixed costs (thread team, weight packing) that would dominate.
  const int64_t image = std::max<int64_t>(1, in_image + out_image);
  const int64_t amortized = (8 * weights_numel) / image + 1;
  const int64_t in_l2 = std::max<int64_t>(1, (int64_t{512} * 1024) / image);
  const int64_t chunk = std::min(q.N, std::max({(q.N + 9) / 10, amortized, in_l2}));
  // Few large images (one long 1D signal): a chunk of whole images would be
  // most of the tensors. Then each image goes in slabs of the outermost
  // axis with more than one output position, each slab's inputs (with the
  // rows its taps reach) and outputs transposed through buffers of about a
  // tenth of the tensors (at least 2 MiB, and 8x the weights, which every
  // call packs again).
  const int64_t total = q.N * image;
  const int64_t want = std::max({total / 10, 8 * weights_numel, int64_t{1} << 19});
  int sa = 0;  // slab axis
  {
    const auto& od = forward ? q.O : q.I;
    while (sa < kAxes - 1 && od[sa] == 1) ++sa;
  }
  const int64_t eo = forward ? q.O[sa] : q.I[sa];
  if (chunk * image > 2 * want && eo >= 2) {
    int64_t in_inner = 1, out_inner = 1;  // positions per step along the slab axis
    for (int c = sa + 1; c < kAxes; ++c) {
      in_inner *= forward ? q.I[c] : q.O[c];
      out_inner *= forward ? q.O[c] : q.I[c];
    }
    const int64_t rows = std::clamp<int64_t>(eo * want / image, 1, eo);
    const int64_t in_rows_max = forward ? (rows + 2 * q.K[sa] * q.d[sa]) / q.s[sa] + 2
                                        : rows * q.s[sa] + (q.K[sa] - 1) * q.d[sa] + 1;
    const int64_t in_e = forward ? q.I[sa] : q.O[sa];
    st.route = Route::NcxSlabs;
    st.axis = sa;
    st.rows = rows;
    st.count = ceil_div(eo, rows);
    st.buffer[kInput] = std::min(in_rows_max, in_e) * in_inner * in_c;
    st.buffer[kOutput] = rows * out_inner * out_c;
    return st;
  }
  st.route = Route::NcxChunks;
  st.images = chunk;
  st.count = chunk > 0 ? ceil_div(q.N, chunk) : 0;
  st.buffer[kInput] = chunk * in_image;
  st.buffer[kOutput] = chunk * out_image;
  return st;
}

// Forward or backward-data of problem q: planar in place where the NCX path
// setting says so, else through the channels-last kernels.
RouteStep conv_step(const CallSpec& s, const ConvProblem& q, ActLayout a, ActLayout b) {
  if (dense_ncx_pair(a, b) && use_planar(s, q, s.pass)) {
    RouteStep st;
    st.route = Route::NcxPlanar;
    st.q = q;
    return st;
  }
  return channels_last_step(s, q, a, b);
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
// slower). `other` is the pass's other activation (diff_src, src).
bool gathers_1x1(const ConvProblem& p, ActLayout diff_dst, ActLayout other, ConvProblem* q) {
  if (!strided_1x1_at_src(p, q) || !dense_ncx_pair(diff_dst, other) ||
      p.N * p.OC() * p.dst_spatial() < (int64_t{1} << 19))
    return false;
  for (int a = 0; a < kAxes; ++a) {
    const auto [lo, hi] = p.tap_src_range(a, 0);
    if (lo != 0 || hi != p.I[a]) return false;
  }
  return true;
}

// Bytes of the largest of a problem's f32 tensors: src, dst and the
// weights (their grad_numel elements).
double largest_bytes(const ConvProblem& q, int64_t grad_numel) {
  return kF32 * std::max({static_cast<double>(q.N) * q.IC() * q.src_spatial(),
                          static_cast<double>(q.N) * q.OC() * q.dst_spatial(),
                          static_cast<double>(grad_numel)});
}

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
  const double largest = largest_bytes(q, grad_numel);
  return std::max({0.1 * largest, (whole ? 8.0 : 2.0) * kF32 * grad_numel, kF32 * (1 << 20)});
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
// for any thread count (SPEC 5). False where it does not apply.
bool plan_pieces(const ConvProblem& q, RouteStep* st) {
  constexpr double kPiece = 2.0 * (1 << 20);  // bytes of activations per piece
  const int64_t P = q.src_spatial(), Q = q.dst_spatial(), IC = q.IC(), OC = q.OC();
  const int64_t grad_numel = weights_floats(q);
  const double image = kF32 * static_cast<double>(IC * P + OC * Q);
  const double total = q.N * image, grad = kF32 * grad_numel;
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
    if (total <= bwd_w_allowance(q, grad_numel, true)) return false;  // whole: within it
    // Larger pieces: as few gradient sums as fit in half the allowance.
    const double allowance = bwd_w_allowance(q, grad_numel, false);
    ok = cut(std::clamp(16.0 * grad, kPiece, std::max(kPiece, 0.5 * allowance)));
  }
  if (!ok) return false;
  st->axis = a;
  st->images = imgs;
  st->rows = rows;
  st->count = pieces;
  // The buffers grow to the largest piece's: the first image's slabs cover every size.
  for (int64_t i0 = 0; i0 < q.I[a]; i0 += rows) {
    int64_t o_lo = 0;
    const ConvProblem qp = piece_problem(*st, 0, i0, &o_lo);
    st->buffer[kInput] = std::max({st->buffer[kInput], int64_t{1}, qp.N * qp.src_spatial() * IC});
    st->buffer[kInput2] = std::max({st->buffer[kInput2], int64_t{1}, qp.N * qp.dst_spatial() * OC});
  }
  return true;
}

// Backward-weights of problem q on (src a, diff_dst b): on dense NCX tensors
// the planar kernels where the NCX path setting says so, else pieces where
// they apply; else (and where those fail) the channels-last kernel on the
// activations viewed, transposed or copied channels-last.
RouteStep bwd_weights_step(const CallSpec& s, const ConvProblem& q, ActLayout a, ActLayout b) {
  RouteStep st;
  st.q = q;
  st.a = to_nxc(a);
  st.b = to_nxc(b);
  const bool pair = dense_ncx_pair(a, b);
  st.planar = pair && use_planar(s, q, Pass::BackwardWeights);
  const bool pieces = pair && plan_pieces(q, &st);  // also the planar kernels' fallback
  if (st.planar || pieces) {
    st.route = st.planar ? Route::NcxPlanar : Route::NcxPieces;
    return st;
  }
  st.route = Route::Nxc;
  if (st.a == ToNxc::Transpose) st.buffer[kInput] = q.N * q.IC() * q.src_spatial();
  if (st.b == ToNxc::Transpose) st.buffer[kInput2] = q.N * q.OC() * q.dst_spatial();
  return st;
}

void plan_forward(const CallSpec& s, CallPlan* plan) {
  const ConvProblem& p = s.p;
  ConvProblem q1;
  // A 1x1 kernel with strides on dense NCX tensors (ResNet's 1x1 s2
  // upsampling): computed at src's resolution (NCX, by the path its own
  // problem takes), then written out once, the positions between the strided
  // ones the bias alone. Channels-last, the whole output went through a buffer,
  // prod(s) - 1 of its positions only bias, and was transposed back. In batch
  // chunks of about a tenth of the batch: the buffer at src's resolution stays
  // within 10 % of the output.
  const bool planar = dense_ncx_pair(s.a, s.b) && use_planar(s, p, Pass::Forward);
  if (planar || !strided_1x1_at_src(p, &q1) || s.ncx_path != NcxPath::Auto ||
      !dense_ncx_pair(s.a, s.b)) {
    plan->step = conv_step(s, p, s.a, s.b);
    return;
  }
  const int64_t chunk = (p.N + 9) / 10;
  plan->s1x1 = Strided1x1::Expand;
  plan->s1x1_images = chunk;
  plan->s1x1_chunks = ceil_div(p.N, chunk);
  plan->s1x1_floats = chunk * p.OC() * p.src_spatial();
  ConvProblem qc = q1;
  qc.N = chunk;
  const ActLayout x = dense_ncx(chunk, p.IC(), p.src_spatial());
  const ActLayout y = dense_ncx(chunk, p.OC(), p.src_spatial());
  plan->step = conv_step(s, qc, x, y);
  if (p.N % chunk != 0) {
    qc.N = p.N % chunk;
    plan->last = conv_step(s, qc, dense_ncx(qc.N, p.IC(), p.src_spatial()),
                           dense_ncx(qc.N, p.OC(), p.src_spatial()));
    plan->has_last = true;
  }
}

// Backward-data with channels-last diff_dst where, on the innermost axis,
// the dilation d > 1 divides the stride (GoogLeNet-style 7x7 s2 d2): src
// position i's taps read diff_dst at i*s - pb + k*d, all of one residue
// r = -pb mod g on each axis whose stride and dilation share g = gcd(s, d) > 1,
// so 1/g of those positions are ever read. Gathered dense, they are the
// diff_dst of the problem with strides s/g, dilations d/g and pads (pb + r)/g,
// whose innermost taps are adjacent (d/g = 1) and fuse into one reduction run
// (backward_data_fuses_taps: 7 runs of 21 floats for 3 channels of a 7x7, not
// 49 of 3); the sums, tap by tap, are the same. Only where the original does
// not fuse and the new problem does. GoogLeNet conv1 7x7 s2 d2 64 <- 3 on
// 224x224, N = 4, NXC, Ice Lake-SP, 2 threads: 1.3x (the gather done in
// Python, measured before this rule). The copy is 1/prod(g) of diff_dst.
bool subsampled_dst(const ConvProblem& p, ActLayout diff_dst, ConvProblem* q, CallPlan* plan) {
  if (!diff_dst.nxc || p.K[2] < 2 || p.d[2] < 2 || p.s[2] % p.d[2] != 0 ||
      x86::backward_data_fuses_taps(p))
    return false;
  ConvProblem n = p;
  std::array<int64_t, kAxes> g{1, 1, 1}, r{0, 0, 0};
  for (int a = 0; a < kAxes; ++a) {
    g[a] = p.K[a] > 1 ? std::gcd(p.s[a], p.d[a]) : 1;
    if (g[a] == 1) continue;
    r[a] = ((-p.pb[a]) % g[a] + g[a]) % g[a];
    n.s[a] = p.s[a] / g[a];
    n.d[a] = p.d[a] / g[a];
    n.pb[a] = (p.pb[a] + r[a]) / g[a];
    n.O[a] = p.O[a] > r[a] ? (p.O[a] - r[a] + g[a] - 1) / g[a] : 0;
    // pads_end / output_padding consistent with O (the kernels read pb only)
    const int64_t reach = (n.I[a] - 1) * n.s[a] + effective_kernel(n.K[a], n.d[a]) - n.pb[a];
    n.pe[a] = std::max<int64_t>(reach - n.O[a], 0);
    n.op[a] = n.O[a] - (reach - n.pe[a]);
  }
  if (!x86::backward_data_fuses_taps(n) || n.dst_spatial() == 0) return false;
  // The copy within the extra-memory bound of the other routes' copies: a
  // twentieth of the largest tensor, or 4 MiB (a long 1D signal keeps its
  // route: its copy would be half of diff_dst).
  const double copy = kF32 * static_cast<double>(n.N) * n.OC() * n.dst_spatial();
  if (copy > std::max(0.05 * largest_bytes(p, weights_floats(p)), 4.0 * (1 << 20))) return false;
  *q = n;
  plan->sub_g = g;
  plan->sub_r = r;
  return true;
}

void plan_backward_data(const CallSpec& s, CallPlan* plan) {
  ConvProblem q;
  if (subsampled_dst(s.p, s.a, &q, plan)) {
    plan->s1x1 = Strided1x1::Subsample;
    plan->s1x1_floats = q.N * q.OC() * q.dst_spatial();
    plan->step = conv_step(s, q, dense_nxc(q.N, q.OC(), q.dst_spatial()), s.b);
    return;
  }
  if (gathers_1x1(s.p, s.a, s.b, &q)) {
    plan->s1x1 = Strided1x1::Gather;
    plan->s1x1_floats = q.N * q.OC() * q.dst_spatial();
    plan->step = conv_step(s, q, dense_ncx(q.N, q.OC(), q.dst_spatial()), s.b);
    return;
  }
  plan->step = conv_step(s, s.p, s.a, s.b);
}

void plan_backward_weights(const CallSpec& s, CallPlan* plan) {
  const ConvProblem& p = s.p;
  plan->grad_floats = weights_floats(p);
  ConvProblem q;
  // A strided 1x1 kernel (gathers_1x1) whose gathered diff_dst would
  // exceed bwd_w_allowance(): gathered in batch chunks within half of it,
  // each chunk's gradient added in chunk order (ResNet's 1x1 s2 keeps its
  // gather); where one image's gather is too large (long lines), not
  // gathered: the strided problem runs as it is (its pieces bound it).
  const double per_image = kF32 * static_cast<double>(p.OC()) * p.src_spatial();
  const double allowance = bwd_w_allowance(p, plan->grad_floats, false);
  const bool gathers = gathers_1x1(p, s.b, s.a, &q);
  if (gathers && p.N * per_image > allowance) {
    const int64_t imgs = static_cast<int64_t>(0.5 * allowance / per_image);
    if (imgs < 1) {
      plan->step = bwd_weights_step(s, p, s.a, s.b);
      return;
    }
    plan->s1x1 = Strided1x1::GatherChunks;
    plan->s1x1_images = imgs;
    plan->s1x1_chunks = ceil_div(p.N, imgs);
    plan->s1x1_floats = std::min(imgs, p.N) * q.OC() * q.dst_spatial();
    ConvProblem qc = q;
    qc.N = std::min(imgs, p.N);
    plan->step = bwd_weights_step(s, qc, dense_ncx(qc.N, p.IC(), p.src_spatial()),
                                  dense_ncx(qc.N, q.OC(), q.dst_spatial()));
    if (p.N % imgs != 0) {
      qc.N = p.N % imgs;
      plan->last = bwd_weights_step(s, qc, dense_ncx(qc.N, p.IC(), p.src_spatial()),
                                    dense_ncx(qc.N, q.OC(), q.dst_spatial()));
      plan->has_last = true;
    }
    return;
  }
  if (gathers) {
    plan->s1x1 = Strided1x1::Gather;
    plan->s1x1_floats = q.N * q.OC() * q.dst_spatial();
    plan->step = bwd_weights_step(s, q, s.a, dense_ncx(q.N, q.OC(), q.dst_spatial()));
    return;
  }
  plan->step = bwd_weights_step(s, p, s.a, s.b);
}

int64_t result_floats(const CallSpec& s) {
  const ConvProblem& p = s.p;
  switch (s.pass) {
    case Pass::Forward: return p.N * p.OC() * p.dst_spatial();
    case Pass::BackwardData: return p.N * p.IC() * p.src_spatial();
    case Pass::BackwardWeights: return weights_floats(p);
  }
  return 0;
}

// ---------------------------------------------------------------- describe

const char* name(Pass pass) {
  switch (pass) {
    case Pass::Forward: return "forward";
    case Pass::BackwardData: return "backward_data";
    case Pass::BackwardWeights: return "backward_weights";
  }
  return "?";
}

const char* name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
  }
  return "?";
}

const char* name(ActLayout l) {
  return l.nxc && l.ncx ? "ncx+nxc" : l.nxc ? "nxc" : l.ncx ? "ncx" : "other";
}

const char* name(Route r) {
  switch (r) {
    case Route::None: return "none";
    case Route::Reference: return "reference";
    case Route::Nxc: return "nxc";
    case Route::NcxPlanar: return "ncx_planar";
    case Route::NcxChunks: return "ncx_chunks";
    case Route::NcxSlabs: return "ncx_slabs";
    case Route::NcxPieces: return "ncx_pieces";
    case Route::Convert16: return "convert16";
  }
  return "?";
}

const char* name(ToNxc t) {
  switch (t) {
    case ToNxc::View: return "view";
    case ToNxc::Transpose: return "transpose";
    case ToNxc::Copy: return "copy";
  }
  return "?";
}

const char* name(Strided1x1 f) {
  switch (f) {
    case Strided1x1::None: return "none";
    case Strided1x1::Expand: return "expand";
    case Strided1x1::Gather: return "gather";
    case Strided1x1::GatherChunks: return "gather_chunks";
    case Strided1x1::Subsample: return "subsample";
  }
  return "?";
}

// The real spatial values of one of p's arrays, as 4x4.
std::string dims(const ConvProblem& p, const std::array<int64_t, kAxes>& a) {
  std::string out;
  for (int64_t v : p.spatial(a)) out += (out.empty() ? "" : "x") + std::to_string(v);
  return out;
}

std::string problem_token(const ConvProblem& p) {
  std::ostringstream os;
  os << "n" << p.N << "_g" << p.G << "_ic" << p.IC() << "_oc" << p.OC() << "_i" << dims(p, p.I)
     << "_o" << dims(p, p.O) << "_k" << dims(p, p.K) << "_s" << dims(p, p.s) << "_d"
     << dims(p, p.d) << "_pb" << dims(p, p.pb) << "_pe" << dims(p, p.pe);
  return os.str();
}

// The describe_* line of the driver a route step calls on problem q.
std::string driver(const CallPlan& plan, const RouteStep& st, const ConvProblem& q) {
  const CallSpec& s = plan.spec;
  if (st.route == Route::NcxPlanar) return x86::describe_planar_f32(s.isa, s.pass, q, s.nthreads);
  if (s.pass == Pass::BackwardWeights)
    return x86::describe_bwd_weights_f32(s.isa, q, s.nthreads, s.weights);
  return x86::describe_conv_f32(s.isa, s.pass, q, s.nthreads);
}

// The first and the last problem a step hands its driver (equal but for chunks,
// slabs and pieces).
std::pair<ConvProblem, ConvProblem> driver_problems(const CallPlan& plan, const RouteStep& st) {
  ConvProblem first = st.q, last = st.q;
  int64_t lo = 0;
  switch (st.route) {
    case Route::NcxChunks:
      first.N = std::min(st.images, st.q.N);
      last.N = st.q.N - (st.count - 1) * st.images;
      break;
    case Route::NcxSlabs: {
      const bool forward = plan.spec.pass == Pass::Forward;
      const int64_t eo = forward ? st.q.O[st.axis] : st.q.I[st.axis];
      const int64_t o_last = (st.count - 1) * st.rows;
      first = slab_problem(st.q, forward, st.axis, 0, std::min(eo, st.rows), &lo);
      last = slab_problem(st.q, forward, st.axis, o_last, std::min(eo, o_last + st.rows), &lo);
      first.N = last.N = 1;
      break;
    }
    case Route::NcxPieces: {
      const int64_t n_last = (st.q.N - 1) / st.images * st.images;
      const int64_t i_last = (st.q.I[st.axis] - 1) / st.rows * st.rows;
      first = piece_problem(st, 0, 0, &lo);
      last = piece_problem(st, n_last, i_last, &lo);
      break;
    }
    default: break;
  }
  return {first, last};
}

bool same(const ConvProblem& a, const ConvProblem& b) {
  return a.N == b.N && a.I == b.I && a.O == b.O && a.pb == b.pb && a.pe == b.pe && a.op == b.op;
}

// The plan line's key of the pair tiles' driver: "amx" (TDPBF16PS), "dpbf16" (VDPBF16PS).
const char* pairs_key(const CallSpec& s) { return s.bf16 == Isa::Avx512Amx ? "amx" : "dpbf16"; }

void describe_step(std::ostream& os, const CallPlan& plan, const RouteStep& st) {
  os << "route=" << name(st.route);
  switch (st.route) {
    case Route::None:
    case Route::Reference: return;
    case Route::Convert16: {
      const Convert16Plan& c = plan.convert;
      os << " images=" << c.images << " chunks=" << c.chunks
         << " f32_bytes="
         << (c.a_floats + c.b_floats + c.b16_floats + c.w_floats) * sizeof(float);
      if (c.slabs) {  // (NCX: kInput and kOutput as large again)
        int64_t lo = 0;
        const ConvProblem q = slab_sides(plan.spec.p, plan.spec.pass == Pass::Forward)
                                  .slab(plan.spec.p, 0, c.rows, &lo);
        os << " axis=" << c.axis << " rows=" << c.rows << " slabs=" << c.slabs;
        if (c.pairs) {
          os << " out16=" << c.pairs_out16 << " ncx=" << c.pairs_ncx << " " << pairs_key(plan.spec)
             << "={" << x86::describe_conv_bf16_pairs(plan.spec.bf16, plan.spec.pass, q,
                                                     plan.spec.nthreads)
             << "}";
          return;
        }
        if (c.planar) {
          os << " driver={" << x86::describe_planar_f32(plan.spec.isa, plan.spec.pass, q,
                                                       plan.spec.nthreads)
             << "}";
          return;
        }
        os << " ncx_bytes=" << (plan.spec.a.nxc ? 0 : c.a_floats + c.b_floats) * sizeof(float)
           << " driver={" << x86::describe_conv_f32(plan.spec.isa, plan.spec.pass, q,
                                                   plan.spec.nthreads)
           << "}";
        return;
      }
      if (c.planar16) {
        os << " planar16={" << x86::describe_planar_f32(plan.spec.isa, plan.spec.pass, plan.spec.p,
                                                       plan.spec.nthreads, plan.spec.dtype)
           << "}";
        return;
      }
      if (c.bww16) {
        os << " bww16={"
           << x86::describe_bwd_weights16(plan.spec.isa, plan.spec.p, plan.spec.nthreads,
                                          kind16(plan.spec.dtype), plan.spec.weights)
           << "}";
        return;
      }
      if (c.pairs && plan.spec.pass == Pass::BackwardWeights) {
        os << " " << pairs_key(plan.spec) << "={"
           << x86::describe_bwd_weights_bf16_pairs(plan.spec.bf16, plan.spec.p, plan.spec.nthreads)
           << "}";
        return;
      }
      if (c.direct16) {
        ConvProblem q = plan.spec.p;
        q.N = c.images;
        const int in16 = c.in16 ? kind16(plan.spec.dtype) : 0;
        os << (c.ncx16 ? " ncx16=1" : "") << (c.wide16 ? " wide16={" : " direct16={")
           << x86::describe_conv_f32_out16(plan.spec.isa, plan.spec.pass, q, plan.spec.nthreads,
                                           in16, c.wide16, !c.ncx16)
           << "}";
        return;
      }
      if (c.pairs) {
        ConvProblem q = plan.spec.p;
        q.N = c.images;
        os << " out16=" << c.pairs_out16 << " ncx=" << c.pairs_ncx << " " << pairs_key(plan.spec)
           << "={" << x86::describe_conv_bf16_pairs(plan.spec.bf16, plan.spec.pass, q,
                                                   plan.spec.nthreads,
                                                   c.pairs_out16 && !c.pairs_ncx)
           << "}";
        return;
      }
      os << " f32={" << describe(*c.full) << "}";
      if (c.last) os << " f32_last={" << describe(*c.last) << "}";
      return;
    }
    case Route::Nxc: os << " to_nxc=" << name(st.a) << "," << name(st.b); break;
    case Route::NcxPlanar: break;
    case Route::NcxChunks: os << " images=" << st.images << " chunks=" << st.count; break;
    case Route::NcxSlabs:
      os << " axis=" << st.axis << " rows=" << st.rows << " slabs=" << st.count;
      break;
    case Route::NcxPieces:
      os << " axis=" << st.axis << " images=" << st.images << " rows=" << st.rows
         << " pieces=" << st.count << " extra_grad_bytes=" << plan.grad_floats * sizeof(float);
      break;
  }
  if (st.route != Route::NcxPlanar) {
    static const char* const slot_names[kRouteSlots] = {"ws_in", "ws_in2", "ws_out"};
    for (int k = 0; k < kRouteSlots; ++k)
      if (st.buffer[k] > 0) os << " " << slot_names[k] << "=" << st.buffer[k] * sizeof(float);
  }
  const auto [first, last] = driver_problems(plan, st);
  os << " driver={" << driver(plan, st, first) << "}";
  if (!same(first, last)) os << " driver_last={" << driver(plan, st, last) << "}";
}

}  // namespace

ActSides act_sides(Pass pass, const ConvProblem& p) {
  if (pass == Pass::BackwardData) return {p.OC(), p.IC(), p.O, p.I};
  return {p.IC(), p.OC(), p.I, p.O};
}

ConvSides conv_sides(bool forward, const ConvProblem& q) {
  if (forward) return {q.IC(), q.src_spatial(), q.OC(), q.dst_spatial()};
  return {q.OC(), q.dst_spatial(), q.IC(), q.src_spatial()};
}

bool strided_1x1_at_src(const ConvProblem& p, ConvProblem* at_src) {
  if (p.taps() != 1) return false;
  bool strided = false;
  for (int a = 0; a < kAxes; ++a) strided = strided || p.s[a] > 1;
  if (!strided) return false;
  ConvProblem q = p;
  q.s = q.d = {1, 1, 1};
  q.pb = q.pe = q.op = {0, 0, 0};
  q.O = q.I;
  *at_src = q;
  return true;
}

// The pads are shifted so that local coordinates keep the global arithmetic
// (and the forward's stride phases): outputs and inputs narrowed on axis a
// (inputs [*lo, *lo + q.I[a]) for the forward, every one the slab reads).
// pe/op are left alone: the kernels read I, O, pb.
ConvProblem slab_problem(const ConvProblem& p, bool forward, int a, int64_t o0, int64_t o1,
                         int64_t* lo_out) {
  ConvProblem q = p;
  const TapAxis ax = p.axis(a);
  int64_t lo, hi;
  if (forward) {  // src i feeds dst o = ax.dst_of(i, k)
    // From the first src position whose last tap reaches o0 or beyond (no
    // later than tap 0's at or before o0) to tap 0's at or before o1 - 1.
    lo = std::max<int64_t>(0, std::min(ax.src_ceil(o0, ax.K - 1), ax.src_floor(o0, 0)));
    lo = std::min(lo, ax.I - 1);
    hi = std::clamp<int64_t>(ax.src_floor(o1 - 1, 0) + 1, lo + 1, ax.I);
    q.I[a] = hi - lo;
    q.O[a] = o1 - o0;
    q.pb[a] = ax.pb + o0 - lo * ax.s;
  } else {  // src i reads dst o = ax.dst_of(i, k)
    lo = std::clamp<int64_t>(ax.dst_of(o0, 0), 0, ax.O - 1);
    hi = std::clamp<int64_t>(ax.dst_of(o1 - 1, ax.K - 1) + 1, lo + 1, ax.O);
    q.I[a] = o1 - o0;
    q.O[a] = hi - lo;
    q.pb[a] = ax.pb - o0 * ax.s + lo;
  }
  *lo_out = lo;
  return q;
}

SlabSides slab_sides(const ConvProblem& p, bool forward) {
  SlabSides g;
  g.forward = forward;
  const ConvSides cs = conv_sides(forward, p);
  g.in_c = cs.in_c, g.in_pixels = cs.in_pixels, g.out_c = cs.out_c, g.out_pixels = cs.out_pixels;
  const auto& od = forward ? p.O : p.I;
  while (g.axis < kAxes - 1 && od[g.axis] == 1) ++g.axis;
  g.eo = od[g.axis];
  for (int a = g.axis + 1; a < kAxes; ++a) {
    g.in_inner *= forward ? p.I[a] : p.O[a];
    g.out_inner *= forward ? p.O[a] : p.I[a];
  }
  return g;
}

ConvProblem SlabSides::slab(const ConvProblem& p, int64_t o0, int64_t rows, int64_t* lo) const {
  ConvProblem q = slab_problem(p, forward, axis, o0, std::min(eo, o0 + rows), lo);
  q.N = 1;
  return q;
}

int64_t SlabSides::in_positions(const ConvProblem& q) const {
  return (forward ? q.I[axis] : q.O[axis]) * in_inner;
}

int64_t SlabSides::out_positions(const ConvProblem& q) const {
  return (forward ? q.O[axis] : q.I[axis]) * out_inner;
}

ConvProblem piece_problem(const RouteStep& st, int64_t n0, int64_t i0, int64_t* o_lo) {
  const ConvProblem& q = st.q;
  const int a = st.axis;
  const TapAxis ax = q.axis(a);
  const int64_t reach = (q.K[a] - 1) * q.d[a];  // diff_dst rows a src row's taps span, - 1
  ConvProblem qp = q;
  qp.N = std::min(st.images, q.N - n0);
  *o_lo = 0;
  if (st.rows < q.I[a]) {  // a slab and its diff_dst window [o_lo, o_hi) along axis a
    const int64_t nr = std::min(st.rows, q.I[a] - i0);
    *o_lo = std::clamp<int64_t>(ax.dst_of(i0, 0), 0, q.O[a]);
    const int64_t o_hi = std::clamp<int64_t>(ax.dst_of(i0 + nr - 1, ax.K - 1) + 1, *o_lo, q.O[a]);
    qp.I[a] = nr;
    qp.O[a] = o_hi - *o_lo;
    qp.pb[a] = q.pb[a] + *o_lo - i0 * q.s[a];  // >= 0: o_lo >= i0*s - pb
    // pe - op from O = (I-1)*s - pb - pe + reach + 1 + op
    const int64_t rest = (nr - 1) * q.s[a] - qp.pb[a] + reach + 1 - qp.O[a];
    qp.pe[a] = std::max<int64_t>(rest, 0);
    qp.op[a] = std::max<int64_t>(-rest, 0);
  }
  return qp;
}

std::string describe_spec(const CallSpec& s) {
  static const char* const act_names[3][2] = {
      {"src", "dst"}, {"diff_dst", "diff_src"}, {"src", "diff_dst"}};
  const auto& an = act_names[static_cast<int>(s.pass)];
  std::ostringstream os;
  os << "pass=" << name(s.pass) << " dtype=" << name(s.dtype) << " " << an[0] << "="
     << name(s.a) << " " << an[1] << "=" << name(s.b)
     << " isa=" << isa_name(s.bf16 != Isa::Reference ? s.bf16 : s.isa)
     << " amd=" << s.amd << " ncx_path=" << ncx_path_name(s.ncx_path)
     << " threads=" << s.nthreads << " problem=" << problem_token(s.p);
  if (s.pass == Pass::BackwardWeights) os << " weights=" << to_string(s.weights);
  return os.str();
}

std::string describe(const CallPlan& plan) {
  std::ostringstream os;
  os << describe_spec(plan.spec);
  if (plan.s1x1 != Strided1x1::None) {
    os << " s1x1=" << name(plan.s1x1);
    if (plan.s1x1 == Strided1x1::Subsample)
      os << " sub_g=" << dims(plan.spec.p, plan.sub_g) << " sub_r=" << dims(plan.spec.p, plan.sub_r);
    else if (plan.s1x1 != Strided1x1::Gather)
      os << " s1x1_images=" << plan.s1x1_images << " s1x1_chunks=" << plan.s1x1_chunks;
    os << " s1x1_bytes=" << plan.s1x1_floats * sizeof(float);
    if (plan.s1x1 == Strided1x1::GatherChunks)
      os << " extra_grad_bytes=" << plan.grad_floats * sizeof(float);
  }
  os << " ";
  describe_step(os, plan, plan.step);
  if (plan.has_last) {
    os << " last={";
    describe_step(os, plan, plan.last);
    os << "}";
  }
  return os.str();
}

// The 16-bit routes' slab budget (floats of copies a slab may take): 1/40
// of the 16-bit tensors' elements (a tenth of the largest tensor's bytes:
// f32 is twice 16-bit), 8x the weights (each slab's kernel packs them
// again), and at least 8 MiB, within the memory bound's slack, so that
// calls of a few MiB keep whole images (SPR, bf16 on AMX: HiFi-GAN 128 -> 64
// k4 s2 on 4096 NCX, 2 MiB of copies, ran 2.2-2.8x slower in 2-3 slabs with
// a 1 MiB floor). Slabs are taken where an image's copies exceed it.
constexpr int64_t kSlabFloorFloats = int64_t{1} << 21;

int64_t slab_budget(const ConvProblem& p, const SlabSides& g) {
  return std::max({p.N * (g.in_c * g.in_pixels + g.out_c * g.out_pixels) / 40,
                   8 * weights_floats(p), kSlabFloorFloats});
}

// Convert16Plan's slabs (plan.h), where an image outgrows the budget.
static bool plan_convert16_slabs(const CallSpec& spec, CallPlan* plan) {
  const ConvProblem& p = spec.p;
  const SlabSides g = slab_sides(p, spec.pass == Pass::Forward);
  const int64_t in_img = g.in_c * g.in_pixels, out_img = g.out_c * g.out_pixels, eo = g.eo;
  Convert16Plan& c = plan->convert;
  if (c.images > 1 || eo < 2) return false;
  if (!(spec.a.nxc || spec.a.ncx) || !(spec.b.nxc || spec.b.ncx)) return false;
  const Convert16Plan chunked = c;  // (kept when slabs are not worth it)
  // The f32 copies of a slab: a's (widened), b's unless the GEMM tiles round
  // into b themselves (channels-last b); dense NCX through the channels-last
  // kernels takes a second buffer a side, the planar kernels none.
  c.planar = spec.a.ncx && spec.b.ncx && use_planar(spec, p, spec.pass);
  const int copies = !c.planar && (!spec.a.nxc || !spec.b.nxc) ? 2 : 1;
  const int64_t budget = slab_budget(p, g);
  auto slab = [&](int64_t o0, int64_t rows) {
    int64_t lo = 0;
    return g.slab(p, o0, rows, &lo);
  };
  auto layout = [&](bool direct) {
    const int64_t per_image = copies * (in_img + (direct ? 0 : out_img));
    c.rows = std::clamp<int64_t>(eo * budget / std::max<int64_t>(1, per_image), 1, eo);
    c.slabs = (eo + c.rows - 1) / c.rows;
    c.a_floats = c.b_floats = 0;
    for (int64_t o0 = 0; o0 < eo; o0 += c.rows) {  // the largest slab's buffers
      const ConvProblem q = slab(o0, c.rows);
      c.a_floats = std::max(c.a_floats, g.in_positions(q) * g.in_c);
      if (!direct) c.b_floats = std::max(c.b_floats, g.out_positions(q) * g.out_c);
    }
    return per_image > budget;  // whether slabs are worth it
  };
  bool direct = spec.b.nxc && !c.planar;
  bool worth = layout(direct);
  if (direct) {  // the first, an inner and the last slab must round in the tiles
    for (int64_t o0 : {int64_t{0}, c.rows, (c.slabs - 1) * c.rows})
      direct = direct && (o0 >= eo || x86::conv_f32_out16_applies(spec.isa, spec.pass,
                                                                    slab(o0, c.rows),
                                                                    spec.nthreads));
    if (!direct) worth = layout(false);
  }
  if (!worth) {
    c = chunked;
    return false;
  }
  c.axis = g.axis;
  c.direct16 = direct;
  plan->copy_a = false;
  plan->step.route = Route::Convert16;
  return true;
}

// Convert16Plan's slabs on the pair tiles (plan.h): the 16-bit channels-last
// copies of a dense NCX slab, and the f32 result of a chunked reduction, per slab.
enum class Slabs { NotNeeded, Planned, Declined };
static Slabs plan_pairs_slabs(const CallSpec& spec, CallPlan* plan) {
  const ConvProblem& p = spec.p;
  const SlabSides g = slab_sides(p, spec.pass == Pass::Forward);
  const int64_t in_img = g.in_c * g.in_pixels, out_img = g.out_c * g.out_pixels, eo = g.eo;
  Convert16Plan& c = plan->convert;
  if (c.images > 1 || eo < 2) return Slabs::NotNeeded;
  const bool ncx = c.pairs_ncx, out16 = c.pairs_out16;
  // Floats of copies per image: 16-bit transposes (half a float an element),
  // the f32 result of a chunked reduction.
  const int64_t per_image = (ncx ? (in_img + 1) / 2 : 0) +
                            (out16 ? 0 : out_img) + (ncx ? (out_img + 1) / 2 : 0);
  const int64_t budget = slab_budget(p, g);
  if (per_image <= budget) return Slabs::NotNeeded;
  const int64_t rows = std::clamp<int64_t>(eo * budget / per_image, 1, eo);
  int64_t a_floats = 0, b_floats = 0, b16_floats = 0;
  const int64_t slabs = (eo + rows - 1) / rows;
  for (int64_t o0 = 0; o0 < eo; o0 += rows) {
    int64_t lo = 0;
    const ConvProblem q = g.slab(p, o0, rows, &lo);
    const int64_t qin = g.in_positions(q) * g.in_c, qout = g.out_positions(q) * g.out_c;
    if (ncx) a_floats = std::max(a_floats, (qin + 1) / 2);
    b_floats = std::max(b_floats, out16 ? (qout + 1) / 2 : qout);
    if (ncx && !out16) b16_floats = std::max(b16_floats, (qout + 1) / 2);
    // The tiles must take the first, an inner and the last slab as the whole.
    if (o0 == 0 || o0 == rows || o0 + rows >= eo) {
      const x86::PairsConvInfo info =
          x86::conv_bf16_pairs_info(spec.bf16, spec.pass, q, spec.nthreads);
      if (!info.applies || info.out16 != out16) return Slabs::Declined;
    }
  }
  c.axis = g.axis;
  c.rows = rows;
  c.slabs = slabs;
  c.w_floats = 0;  // the bf16 weights are packed as they are
  c.a_floats = a_floats;
  c.b_floats = b_floats;
  c.b16_floats = b16_floats;
  plan->step.route = Route::Convert16;
  return Slabs::Planned;
}

// Whether bf16 goes to the pair tiles of spec.bf16 (heuristics A12): AMX
// always; VDPBF16PS on AMD's AVX-512 cores (Zen 4, Zen 5: at the f32 FMA
// instruction rate, twice its products; not measured here), not on Intel's
// (Sapphire Rapids: at half the FMA instruction rate, 121 against 242
// GFLOP/s a core, so the tiles ran 1.5x slower than widening to f32).
static bool pairs_pay(const CallSpec& spec) {
  return spec.bf16 == Isa::Avx512Amx || (spec.bf16 == Isa::Avx512Bf16 && spec.amd);
}

// Route::Convert16 (plan.h). Its f32 copies are per-thread buffers kept
// between calls (Workspace::buffer): fresh pages cost more than the widening
// itself (a 4 MiB first touch took 3.8 ms on the Sapphire Rapids VM, and a
// DCGAN 256 -> 128 forward ran 1.7x slower in bf16 than in f32 with fresh
// buffers). A chunk's f32 buffers hold at least an eighth
// of the call's activations, 8 MiB, or 8x the weights (each chunk's f32 plan
// packs the weights again), whichever is largest; the extra memory is then
// about a quarter of the 16-bit tensors for large calls.
// Convert16 on the pair tiles (plan.h); false where they do not take the call.
static bool plan_pairs16(const CallSpec& spec, CallPlan* plan, const ConvProblem& chunk) {
  const ConvProblem& p = spec.p;
  const ActSides sd = act_sides(spec.pass, p);
  const int64_t a_img = sd.a_image(), b_img = sd.b_image();
  Convert16Plan& c = plan->convert;
  if (spec.dtype != DType::BF16 || !pairs_pay(spec)) return false;
  // Backward-weights: every image at once; src through a 16-bit CNX copy,
  // diff_dst read as channels-last, in place or through a 16-bit copy.
  if (spec.pass == Pass::BackwardWeights) {
    if (!x86::bww_bf16_pairs_applies(spec.bf16, p)) return false;
    plan->copy_b = !spec.b.nxc && !spec.b.ncx;
    c.pairs = true;
    c.images = p.N;
    c.chunks = 1;
    c.a_floats = (p.N * a_img + 1) / 2;  // src -> CNX
    c.b_floats = spec.b.nxc || plan->copy_b ? 0 : (p.N * b_img + 1) / 2;  // diff_dst -> NXC
    // The tiles write the bf16 gradient; their f32 sums (or shared panels) in
    // a buffer kept between calls (a fresh 14 MiB one faulted its pages in
    // every call: 3D U-Net's dilated 512 -> 256 k3 ran 7.7 instead of 3.4 ms).
    c.w_floats = x86::bww_bf16_pairs_scratch_floats(spec.bf16, p, spec.nthreads);
    plan->step.route = Route::Convert16;
    return true;
  }
  // Forward / backward-data: channels-last activations read in place; dense
  // NCX ones through 16-bit channels-last copies of a chunk (a, and b unless
  // it is written straight into the result).
  const bool pairs_nxc = (spec.a.nxc || plan->copy_a) && spec.b.nxc;
  const bool pairs_ncx = !pairs_nxc && spec.a.ncx && spec.b.ncx;
  if (!pairs_nxc && !pairs_ncx) return false;
  const x86::PairsConvInfo info =
      x86::conv_bf16_pairs_info(spec.bf16, spec.pass, chunk, spec.nthreads);
  if (!info.applies) return false;
  c.pairs = true;
  c.pairs_out16 = info.out16;
  c.pairs_ncx = pairs_ncx;
  // Channels-last with a 16-bit result copies nothing: the whole batch in one
  // call (batch chunks sized for copies would only add parallel regions, and
  // split 8 images 7 + 1).
  if (pairs_nxc && info.out16 && chunk.N < p.N) {
    const x86::PairsConvInfo whole = x86::conv_bf16_pairs_info(spec.bf16, spec.pass, p, spec.nthreads);
    if (whole.applies && whole.out16) {
      c.images = p.N;
      c.chunks = 1;
    }
  }
  // Copying whole images (dense NCX, or a chunked reduction's f32 result) of
  // one image beyond the copies' budget: slabs, on the pair tiles where they
  // take every slab alike, else through the f32 copies' slabs.
  if (c.pairs_ncx || !c.pairs_out16) {
    const Slabs slabs = plan_pairs_slabs(spec, plan);
    if (slabs == Slabs::Planned) return true;
    if (slabs == Slabs::Declined) {
      const Convert16Plan on_pairs = c;
      c.pairs = c.pairs_out16 = c.pairs_ncx = false;
      if (plan_convert16_slabs(spec, plan)) return true;
      c = on_pairs;
    }
  }
  const int64_t a16 = (c.images * a_img + 1) / 2, b16 = (c.images * b_img + 1) / 2;
  c.w_floats = 0;  // the bf16 weights are packed as they are
  c.a_floats = c.pairs_ncx ? a16 : 0;  // NXC: read in place
  c.b_floats = c.pairs_out16 ? (c.pairs_ncx ? b16 : 0) : c.images * b_img;
  c.b16_floats = c.pairs_ncx && !c.pairs_out16 ? b16 : 0;
  plan->step.route = Route::Convert16;
  return true;
}

// Convert16 on the 16-bit tensors themselves, the whole call at once (no f32
// copies of the activations): planar16, bww16, in16 (plan.h); false where
// none applies.
static bool plan_whole16(const CallSpec& spec, CallPlan* plan) {
  const ConvProblem& p = spec.p;
  Convert16Plan& c = plan->convert;
  auto whole_call = [&](bool& flag) {
    flag = true;
    c.images = p.N;
    c.chunks = 1;
    c.a_floats = c.b_floats = 0;
    plan->step.route = Route::Convert16;
    return true;
  };
  const bool bww = spec.pass == Pass::BackwardWeights;
  // Dense NCX where the planar kernels take the 16-bit tensors themselves
  // (forward / backward-data: tiles and depthwise rows; backward-weights:
  // dot tiles and im2col GEMMs, into the f32 gradient), whatever the size.
  if (spec.a.ncx && spec.b.ncx && use_planar(spec, p, spec.pass) &&
      (bww ? x86::planar_bwd_weights_takes16(spec.isa)
           : x86::planar_takes16(spec.isa, p, spec.pass == Pass::Forward, spec.nthreads)))
    return whole_call(c.planar16);
  if (!spec.a.nxc || !spec.b.nxc) return false;
  const int kind = kind16(spec.dtype);
  // Channels-last backward-weights: the driver reads the 16-bit rows itself,
  // widening them as it packs or loads them (heuristics A14).
  if (bww) return x86::backward_weights16_applies(spec.isa, p, spec.nthreads, kind) &&
                  whole_call(c.bww16);
  // Channels-last depthwise forward / backward-data: the depthwise tiles read
  // the 16-bit a in place (converting as they load) and round the result
  // into b (heuristics A13).
  if (!x86::conv_f32_out16_applies(spec.isa, spec.pass, p, spec.nthreads, kind)) return false;
  c.direct16 = true;
  return whole_call(c.in16);
}

static void plan_convert16(const CallSpec& spec, CallPlan* plan) {
  const ConvProblem& p = spec.p;
  const ActSides sd = act_sides(spec.pass, p);
  const int64_t a_img = sd.a_image(), b_img = sd.b_image();
  if (p.N == 0 || a_img == 0 || b_img == 0) {  // nothing to widen: zeros, by the reference
    plan->step.route = Route::Reference;
    return;
  }
  const int64_t per_image = a_img + b_img;
  const int64_t w = weights_floats(p);
  const double target = std::max({static_cast<double>(p.N) * per_image / 8.0,
                                  static_cast<double>(int64_t{1} << 21), 8.0 * w});
  Convert16Plan& c = plan->convert;
  c.images = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(target / per_image)), 1, p.N);
  c.chunks = (p.N + c.images - 1) / c.images;
  // Chunks of equal size (8 images in 4 + 4, not 7 + 1: a one-image chunk
  // is a call of its own, with its own parallel regions), no larger.
  c.images = (p.N + c.chunks - 1) / c.chunks;
  c.chunks = (p.N + c.images - 1) / c.images;
  c.a_floats = c.images * a_img;
  c.b_floats = c.images * b_img;
  c.w_floats = w;  // fwd / bwd-data: the weights' span is set by execute from the view
  plan->copy_a = !spec.a.nxc && !spec.a.ncx;
  ConvProblem chunk = p;
  chunk.N = c.images;
  if (plan_pairs16(spec, plan, chunk) || plan_whole16(spec, plan)) return;
  // One image beyond the copies' budget (a long 1D signal, a large image):
  // slabs of it, as the f32 NCX route's (N5), each within slab_budget().
  if (spec.pass != Pass::BackwardWeights && plan_convert16_slabs(spec, plan)) return;
  // Elsewhere, channels-last forward / backward-data whose f32 GEMM tiles
  // round the result themselves write it straight into b (no f32 result
  // buffer, no narrowing pass); a is still widened per chunk.
  if (spec.pass != Pass::BackwardWeights && (spec.a.nxc || plan->copy_a) && spec.b.nxc &&
      x86::conv_f32_out16_applies(spec.isa, spec.pass, chunk, spec.nthreads)) {
    c.direct16 = true;
    c.b_floats = 0;
    plan->step.route = Route::Convert16;
    return;
  }
  // Dense NCX a and b where those tiles round the result: through 16-bit
  // channels-last copies of each chunk (heuristics A24); not for a one-pixel
  // a, which the f32 route reads as channels-last in place, nor for fewer
  // than 32 channels a side (whole 32 x 32 transpose blocks) unless depthwise;
  // on AVX2 not where the f32 route runs planar in place (a one-pixel
  // diff_src: DCGAN z's backward-data 1.3x slower through ncx16 on Zen 3).
  const bool ncx16_channels =
      std::min(sd.a_c, sd.b_c) >= 32 || (p.ICg == 1 && p.OCg == 1);
  const bool ncx16_isa = spec.isa == Isa::Avx512 ||
                         (spec.isa == Isa::Avx2 && !use_planar(spec, p, spec.pass));
  if (spec.pass != Pass::BackwardWeights && ncx16_isa && spec.a.ncx &&
      !spec.a.nxc && spec.b.ncx && ncx16_channels &&
      x86::conv_f32_out16_applies(spec.isa, spec.pass, chunk, spec.nthreads)) {
    c.direct16 = c.ncx16 = true;
    c.in16 = x86::conv_f32_out16_applies(spec.isa, spec.pass, chunk, spec.nthreads,
                                         kind16(spec.dtype));
    c.a16_floats = (c.images * a_img + 1) / 2;
    c.a_floats = c.in16 ? 0 : c.images * a_img;
    c.b_floats = (c.images * b_img + 1) / 2;
    plan->step.route = Route::Convert16;
    return;
  }
  // Where they cannot (several reduction chunks), an f32 result per chunk
  // rounded after it, the 16-bit weights still packed as read (heuristics A23).
  if (spec.pass != Pass::BackwardWeights && (spec.a.nxc || plan->copy_a) && spec.b.nxc &&
      x86::conv_f32_wide16_applies(spec.isa, spec.pass, chunk, spec.nthreads)) {
    c.direct16 = c.wide16 = true;
    plan->step.route = Route::Convert16;
    return;
  }
  CallSpec f32 = spec;
  f32.dtype = DType::F32;
  f32.bf16 = Isa::Reference;
  plan->copy_b = spec.pass == Pass::BackwardWeights && !spec.b.nxc && !spec.b.ncx;
  if (plan->copy_a) f32.a = {true, false};
  if (plan->copy_b) f32.b = {true, false};
  f32.p.N = c.images;
  c.full = std::make_shared<const CallPlan>(make_call_plan(f32));
  const int64_t rest = p.N - (c.chunks - 1) * c.images;
  if (rest != c.images) {
    f32.p.N = rest;
    c.last = std::make_shared<const CallPlan>(make_call_plan(f32));
  }
  plan->step.route = Route::Convert16;
}

CallPlan make_call_plan(const CallSpec& in) {
  CallPlan plan;
  plan.spec = in;
  plan.spec.isa = vector_isa(in.isa);
  if (plan.spec.bf16 == Isa::Reference) plan.spec.bf16 = bf16_isa(in.isa);
  plan.spec.amd = in.amd && plan.spec.isa == Isa::Avx512;  // (Zen 3, also AMD, has no AVX-512)
  const CallSpec spec = plan.spec;  // (a copy: the builders below write into plan)
  plan.transpose = transpose_f32_kernels(spec.isa);
  plan.step.q = spec.p;
  if (result_floats(spec) == 0) {
    plan.step.route = Route::None;
    return plan;
  }
  // f32 and (through f32) the 16-bit types, on an ISA with kernels; the
  // results are allocated dense by the caller (ops/), so any other result
  // layout is not planned.
  const bool sixteen = spec.dtype == DType::BF16 || spec.dtype == DType::F16;
  if ((spec.dtype != DType::F32 && !sixteen) || spec.isa == Isa::Reference ||
      (spec.pass != Pass::BackwardWeights && !spec.b.nxc && !spec.b.ncx)) {
    plan.step.route = Route::Reference;
    return plan;
  }
  if (sixteen) {
    plan_convert16(spec, &plan);
    return plan;
  }
  switch (spec.pass) {
    case Pass::Forward: plan_forward(spec, &plan); break;
    case Pass::BackwardData: plan_backward_data(spec, &plan); break;
    case Pass::BackwardWeights: plan_backward_weights(spec, &plan); break;
  }
  plan.copy_a = plan.step.route == Route::Nxc && plan.step.a == ToNxc::Copy;
  plan.copy_b = plan.step.route == Route::Nxc && plan.step.b == ToNxc::Copy;
  return plan;
}

}  // namespace tct
