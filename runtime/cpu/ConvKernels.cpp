// ConvKernels.cpp - the convolutions of lwrt/cpu_nn.h
//
// Float32 convolutions run on oneDNN's primitives (forward, backward data,
// backward weights), each made once per shape on the calling thread
// (cpu/Dnnl.h) with the layouts oneDNN prefers (blocked formats on AVX2),
// reordered from and to the arena's plain NCHW through scratch memory.
// Float64, and any case oneDNN does not take, lowers to im2col and one
// gemm per (image, group), the reference's order of operations.
#include "Bf16.h"
#include "Blas.h"
#include "Common.h"
#include "Dnnl.h"
#include "lwrt/cpu_nn.h"
#include "lwrt/kernel_checks.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

namespace lwrt::cpu {
namespace {

using detail::dispatch;
using detail::Key;
using detail::matmulInto;
using detail::Operand;
using detail::sameType;
using detail::ScratchPlan;
using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

/// The geometry of one convolution, checked against the views.
//===--- oneDNN -----------------------------------------------------------===//

enum KernelId : int64_t { kConvForward = 1, kConvBackwardData, kConvBackwardWeights };

/// The cache key of a convolution kernel: its geometry, attributes and the
/// team it runs on.
Key convKey(KernelId id, const ConvGeom& g, const Conv2dParams& p, bool bias, const Activation& act,
            Layout src, Layout dst) {
  int64_t lo, hi;
  std::memcpy(&lo, &act.min, sizeof lo);
  std::memcpy(&hi, &act.max, sizeof hi);
  return {id,
          g.N,
          g.C,
          g.H,
          g.W,
          g.M,
          g.KH,
          g.KW,
          g.OH,
          g.OW,
          g.G,
          p.strides[0],
          p.strides[1],
          p.pads[0],
          p.pads[1],
          p.pads[2],
          p.pads[3],
          p.dilations[0],
          p.dilations[1],
          bias,
          act.kind,
          lo,
          hi,
          detail::poolThreads(),
          static_cast<int64_t>(src),
          static_cast<int64_t>(dst)};
}

/// The memory descriptors of a convolution: the views' plain layouts and
/// `any` for the primitive to choose.
struct ConvDescs {
  dnnl::memory::desc src, wei, dst, bias, srcAny, weiAny, dstAny;
  dims strides, dilations, padL, padR;
};

/// The view's layout as a memory format tag.
tag tagOf(Layout l) { return l == Layout::NChw8c ? tag::nChw8c : tag::nchw; }

/// `src` and `dst` take the layouts of the views that hold them.
ConvDescs convDescs(const ConvGeom& g, const Conv2dParams& p, Layout src, Layout dst) {
  using dt = dnnl::memory::data_type;
  ConvDescs d;
  dims x{g.N, g.C, g.H, g.W}, y{g.N, g.M, g.OH, g.OW};
  dims w = g.G > 1 ? dims{g.G, g.Mg, g.Cg, g.KH, g.KW} : dims{g.M, g.Cg, g.KH, g.KW};
  d.src = {x, dt::f32, tagOf(src)};
  d.dst = {y, dt::f32, tagOf(dst)};
  d.wei = {w, dt::f32, g.G > 1 ? tag::goihw : tag::oihw};
  d.bias = {{g.M}, dt::f32, tag::x};
  d.srcAny = {x, dt::f32, tag::any};
  d.dstAny = {y, dt::f32, tag::any};
  d.weiAny = {w, dt::f32, tag::any};
  d.strides = {p.strides[0], p.strides[1]};
  d.dilations = {p.dilations[0] - 1, p.dilations[1] - 1};
  d.padL = {p.pads[0], p.pads[1]};
  d.padR = {p.pads[2], p.pads[3]};
  return d;
}

dnnl::primitive_attr userScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::convolution_forward::primitive_desc forwardDesc(const ConvDescs& d, bool bias,
                                                      const Activation& act) {
  const dnnl::engine& engine = detail::dnnlContext().engine;
  dnnl::primitive_attr attr = userScratchpad();
  if (act.kind != Activation::None) {
    dnnl::post_ops ops;
    if (act.kind == Activation::Relu)
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    else
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, static_cast<float>(act.min),
                         static_cast<float>(act.max));
    attr.set_post_ops(ops);
  }
  using fwd = dnnl::convolution_forward;
  if (bias)
    return fwd::primitive_desc(fwd::desc(dnnl::prop_kind::forward_training,
                                         dnnl::algorithm::convolution_direct, d.srcAny, d.weiAny,
                                         d.bias, d.dstAny, d.strides, d.dilations, d.padL, d.padR),
                               attr, engine);
  return fwd::primitive_desc(fwd::desc(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::convolution_direct, d.srcAny, d.weiAny,
                                       d.dstAny, d.strides, d.dilations, d.padL, d.padR),
                             attr, engine);
}

/// A prepared convolution primitive: its operands (in, in, out) and its
/// scratchpad, in one piece of the thread's scratch.
struct ConvKernel : detail::Prepared {
  dnnl::primitive prim;
  Operand a, b, out;
  dnnl::memory bias, scratchpad;
  size_t scratchpadAt = 0, scratchBytes = 0;
  int argA = 0, argB = 0, argOut = 0;
  /// oneDNN has no direct kernel for it and would fall back to a gemm per
  /// image (backward weights on tiny images): ConvKernels' batched im2col
  /// takes it instead.
  bool gemmFallback = false;

  template <typename Pd> void finishPlan(const Pd& pd, ScratchPlan& plan) {
    const dnnl::engine& engine = detail::dnnlContext().engine;
    dnnl::memory::desc sp = pd.scratchpad_desc();
    scratchpadAt = plan.add(sp.get_size());
    scratchpad = dnnl::memory(sp, engine, nullptr);
    scratchBytes = plan.total();
  }

  void run(void* da, void* db, void* dout, void* dbias) {
    dnnl::stream& s = detail::dnnlContext().stream;
    unsigned char* base = detail::scratch(scratchBytes);
    a.bind(da, base, s);
    b.bind(db, base, s);
    out.bind(dout, base, s);
    scratchpad.set_data_handle(base + scratchpadAt);
    std::unordered_map<int, dnnl::memory> args{
        {argA, a.want}, {argB, b.want}, {argOut, out.want}, {DNNL_ARG_SCRATCHPAD, scratchpad}};
    if (dbias) {
      bias.set_data_handle(dbias);
      args.emplace(DNNL_ARG_BIAS, bias);
    }
    prim.execute(s, args);
    out.finish(s);
    s.wait();
  }
};

bool dnnlForward(const ConvGeom& g, const Conv2dParams& p, const TensorView& x, const TensorView& w,
                 const TensorView* b, const TensorView& y, const Activation& act) {
  auto& k = detail::prepared<ConvKernel>(
      convKey(kConvForward, g, p, b != nullptr, act, x.layout, y.layout), [&](ConvKernel& k) {
        ConvDescs d = convDescs(g, p, x.layout, y.layout);
        auto pd = forwardDesc(d, b != nullptr, act);
        ScratchPlan plan;
        k.a.plan(d.src, pd.src_desc(), true, plan);
        k.b.plan(d.wei, pd.weights_desc(), true, plan);
        k.out.plan(d.dst, pd.dst_desc(), false, plan);
        k.bias = dnnl::memory(d.bias, detail::dnnlContext().engine, nullptr);
        k.finishPlan(pd, plan);
        k.prim = dnnl::convolution_forward(pd);
        k.argA = DNNL_ARG_SRC;
        k.argB = DNNL_ARG_WEIGHTS;
        k.argOut = DNNL_ARG_DST;
      });
  if (!k.ok)
    return false;
  k.run(x.data, w.data, y.data, b ? b->data : nullptr);
  return true;
}

bool dnnlBackwardData(const ConvGeom& g, const Conv2dParams& p, const TensorView& dy,
                      const TensorView& w, const TensorView& dx) {
  auto& k = detail::prepared<ConvKernel>(
      convKey(kConvBackwardData, g, p, false, {}, dx.layout, dy.layout), [&](ConvKernel& k) {
        ConvDescs d = convDescs(g, p, dx.layout, dy.layout);
        auto hint = forwardDesc(d, false, {});
        using bwd = dnnl::convolution_backward_data;
        bwd::primitive_desc pd(bwd::desc(dnnl::algorithm::convolution_direct, d.srcAny, d.weiAny,
                                         d.dstAny, d.strides, d.dilations, d.padL, d.padR),
                               userScratchpad(), detail::dnnlContext().engine, hint);
        ScratchPlan plan;
        k.a.plan(d.dst, pd.diff_dst_desc(), true, plan);
        k.b.plan(d.wei, pd.weights_desc(), true, plan);
        k.out.plan(d.src, pd.diff_src_desc(), false, plan);
        k.finishPlan(pd, plan);
        k.prim = bwd(pd);
        k.argA = DNNL_ARG_DIFF_DST;
        k.argB = DNNL_ARG_WEIGHTS;
        k.argOut = DNNL_ARG_DIFF_SRC;
      });
  if (!k.ok)
    return false;
  k.run(dy.data, w.data, dx.data, nullptr);
  return true;
}

bool dnnlBackwardWeights(const ConvGeom& g, const Conv2dParams& p, const TensorView& x,
                         const TensorView& dy, const TensorView& dw) {
  auto& k = detail::prepared<ConvKernel>(
      convKey(kConvBackwardWeights, g, p, false, {}, x.layout, dy.layout), [&](ConvKernel& k) {
        ConvDescs d = convDescs(g, p, x.layout, dy.layout);
        auto hint = forwardDesc(d, false, {});
        using bwd = dnnl::convolution_backward_weights;
        bwd::primitive_desc pd(bwd::desc(dnnl::algorithm::convolution_direct, d.srcAny, d.weiAny,
                                         d.dstAny, d.strides, d.dilations, d.padL, d.padR),
                               userScratchpad(), detail::dnnlContext().engine, hint);
        ScratchPlan plan;
        k.a.plan(d.src, pd.src_desc(), true, plan);
        k.b.plan(d.dst, pd.diff_dst_desc(), true, plan);
        k.out.plan(d.wei, pd.diff_weights_desc(), false, plan);
        k.finishPlan(pd, plan);
        k.prim = bwd(pd);
        k.argA = DNNL_ARG_SRC;
        k.argB = DNNL_ARG_DIFF_DST;
        k.argOut = DNNL_ARG_DIFF_WEIGHTS;
        k.gemmFallback = std::string(pd.impl_info_str()).find("gemm") != std::string::npos;
      });
  if (!k.ok || k.gemmFallback)
    return false;
  k.run(x.data, dy.data, dw.data, nullptr);
  return true;
}

/// A convolution's activations: row-major, or float32 nChw8c.
bool convLayouts(std::initializer_list<const TensorView*> views) {
  for (const TensorView* v : views)
    if (v->layout != Layout::RowMajor && !detail::blocked8({v}))
      return false;
  return true;
}

/// Whether oneDNN takes the convolution: float32, and no empty tensor.
bool onDnnl(DType t, const ConvGeom& g) {
  return t == DType::F32 && g.N > 0 && g.C > 0 && g.M > 0 && g.OH > 0 && g.OW > 0;
}

//===--- im2col -----------------------------------------------------------===//

/// col[K, P] of the group's channels of one image (x points at channel 0
/// of the group).
template <typename T> void im2col(const T* x, const ConvGeom& g, const Conv2dParams& p, T* col) {
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t i = 0; i < g.KH; ++i)
      for (int64_t j = 0; j < g.KW; ++j) {
        T* row = col + ((c * g.KH + i) * g.KW + j) * g.P();
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          int64_t ih = oh * p.strides[0] - p.pads[0] + i * p.dilations[0];
          T* out = row + oh * g.OW;
          if (ih < 0 || ih >= g.H) {
            std::fill(out, out + g.OW, T(0));
            continue;
          }
          const T* src = x + (c * g.H + ih) * g.W;
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            int64_t iw = ow * p.strides[1] - p.pads[1] + j * p.dilations[1];
            out[ow] = iw >= 0 && iw < g.W ? src[iw] : T(0);
          }
        }
      }
}

/// Adds col[K, P] back into the group's channels of one image.
template <typename T> void col2im(const T* col, const ConvGeom& g, const Conv2dParams& p, T* x) {
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t i = 0; i < g.KH; ++i)
      for (int64_t j = 0; j < g.KW; ++j) {
        const T* row = col + ((c * g.KH + i) * g.KW + j) * g.P();
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          int64_t ih = oh * p.strides[0] - p.pads[0] + i * p.dilations[0];
          if (ih < 0 || ih >= g.H)
            continue;
          T* dst = x + (c * g.H + ih) * g.W;
          for (int64_t ow = 0; ow < g.OW; ++ow) {
            int64_t iw = ow * p.strides[1] - p.pads[1] + j * p.dilations[1];
            if (iw >= 0 && iw < g.W)
              dst[iw] += row[oh * g.OW + ow];
          }
        }
      }
}

template <typename T>
void conv2dIm2col(const ConvGeom& g, const Conv2dParams& p, const TensorView& xv,
                  const TensorView& wv, const TensorView* bv, const TensorView& yv,
                  const Activation& act) {
  const T *x = xv.as<T>(), *w = wv.as<T>();
  T* y = yv.as<T>();
  std::vector<T> col(static_cast<size_t>(g.K() * g.P()));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t gi = 0; gi < g.G; ++gi) {
      im2col(x + (n * g.C + gi * g.Cg) * g.H * g.W, g, p, col.data());
      matmulInto<T>(false, false, g.Mg, g.P(), g.K(), T(1), w + gi * g.Mg * g.K(), g.K(),
                    col.data(), g.P(), T(0), y + (n * g.M + gi * g.Mg) * g.P(), g.P());
    }
  if (bv) {
    const T* b = bv->as<T>();
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t m = 0; m < g.M; ++m) {
        T* row = y + (n * g.M + m) * g.P();
        for (int64_t k = 0; k < g.P(); ++k)
          row[k] += b[m];
      }
  }
  if (act.kind != Activation::None)
    for (int64_t k = 0, n = yv.numel(); k < n; ++k)
      y[k] = act.apply(y[k]);
}

template <typename T>
void conv2dGradInputIm2col(const ConvGeom& g, const Conv2dParams& p, const TensorView& dyv,
                           const TensorView& wv, const TensorView& dxv) {
  const T *dy = dyv.as<T>(), *w = wv.as<T>();
  T* dx = dxv.as<T>();
  std::fill(dx, dx + dxv.numel(), T(0));
  std::vector<T> col(static_cast<size_t>(g.K() * g.P()));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t gi = 0; gi < g.G; ++gi) {
      // col[K, P] = W_g^T [K, Mg] * dY_g [Mg, P]
      matmulInto<T>(true, false, g.K(), g.P(), g.Mg, T(1), w + gi * g.Mg * g.K(), g.K(),
                    dy + (n * g.M + gi * g.Mg) * g.P(), g.P(), T(0), col.data(), g.P());
      col2im(col.data(), g, p, dx + (n * g.C + gi * g.Cg) * g.H * g.W);
    }
}

/// dW as one product per group over every image: dW_g [Mg, K] = dY_g [Mg,
/// N*P] * cols_g [K, N*P]^T, dY gathered and the images' columns laid side
/// by side in scratch (in chunks of images when they would take more than
/// 64 MiB). For what oneDNN would run as a small gemm per image: a
/// backward-weights on maps of a few pixels, where each image's product
/// sums over only P.
void conv2dGradFilterBatched(const ConvGeom& g, const Conv2dParams& p, const TensorView& xv,
                             const TensorView& dyv, const TensorView& dwv) {
  const float *x = xv.as<float>(), *dy = dyv.as<float>();
  float* dw = dwv.as<float>();
  const int64_t P = g.P(), K = g.K();
  const int64_t perImage = (K + g.Mg) * P;
  const int64_t chunk =
      std::clamp<int64_t>((int64_t{16} << 20) / std::max<int64_t>(perImage, 1), 1, g.N);
  float* cols = reinterpret_cast<float*>(
      detail::scratch(static_cast<size_t>(chunk * perImage) * sizeof(float)));
  float* dys = cols + chunk * K * P;
  for (int64_t gi = 0; gi < g.G; ++gi)
    for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
      const int64_t nb = std::min(chunk, g.N - n0), ld = nb * P;
      detail::parallelFor(nb, 1, [&](int64_t first, int64_t last) {
        std::vector<float> col(static_cast<size_t>(K * P));
        for (int64_t n = first; n < last; ++n) {
          im2col(x + ((n0 + n) * g.C + gi * g.Cg) * g.H * g.W, g, p, col.data());
          for (int64_t k = 0; k < K; ++k)
            std::copy(col.data() + k * P, col.data() + (k + 1) * P, cols + k * ld + n * P);
          for (int64_t m = 0; m < g.Mg; ++m) {
            const float* src = dy + ((n0 + n) * g.M + gi * g.Mg + m) * P;
            std::copy(src, src + P, dys + m * ld + n * P);
          }
        }
      });
      matmulInto<float>(false, true, g.Mg, K, ld, 1.f, dys, ld, cols, ld, n0 == 0 ? 0.f : 1.f,
                        dw + gi * g.Mg * K, K);
    }
}

template <typename T>
void conv2dGradFilterIm2col(const ConvGeom& g, const Conv2dParams& p, const TensorView& xv,
                            const TensorView& dyv, const TensorView& dwv) {
  const T *x = xv.as<T>(), *dy = dyv.as<T>();
  T* dw = dwv.as<T>();
  std::fill(dw, dw + dwv.numel(), T(0));
  std::vector<T> col(static_cast<size_t>(g.K() * g.P()));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t gi = 0; gi < g.G; ++gi) {
      im2col(x + (n * g.C + gi * g.Cg) * g.H * g.W, g, p, col.data());
      // dW_g [Mg, K] += dY_g [Mg, P] * col^T [P, K]
      matmulInto<T>(false, true, g.Mg, g.K(), g.P(), T(1), dy + (n * g.M + gi * g.Mg) * g.P(),
                    g.P(), col.data(), g.P(), T(1), dw + gi * g.Mg * g.K(), g.K());
    }
}

/// A row-major copy of an nChw8c view (or the view itself), for the paths
/// that do not run on oneDNN; `back` writes a copy's values to the view.
struct RowMajorCopy {
  TensorView view;
  std::vector<float> data;
  explicit RowMajorCopy(const TensorView& v) : view(v) {
    if (v.layout == Layout::RowMajor)
      return;
    data.resize(static_cast<size_t>(v.numel()));
    view = TensorView{data.data(), v.dtype, v.shape};
    convert(v.as<float>(), data.data(), true);
  }
  void back(const TensorView& v) {
    if (v.layout != Layout::RowMajor)
      convert(v.as<float>(), data.data(), false);
  }
  /// nChw8c <-> row-major, element by element.
  void convert(float* blocked, float* plain, bool toPlain) const {
    const int64_t N = view.shape[0], C = view.shape[1], HW = view.shape[2] * view.shape[3];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t q = 0; q < HW; ++q) {
          float& b = blocked[((n * C + c - c % 8) * HW + q * 8) + c % 8];
          float& r = plain[(n * C + c) * HW + q];
          (toPlain ? r : b) = toPlain ? b : r;
        }
  }
};

bool conv2dAny(const TensorView& x, const TensorView& w, const TensorView* bias,
               const TensorView& y, const Conv2dParams& p, const Activation& act) {
  if (detail::Float32Views::any({&x, &w, bias, &y})) {
    detail::Float32Views f;
    return sameType(x.dtype, {&x, &w, &y}) && (!bias || bias->dtype == x.dtype) &&
           conv2dAny(f.in(x), f.in(w), bias ? &f.in(*bias) : nullptr, f.out(y), p, act) &&
           f.commit();
  }
  if (!isFloat(x.dtype) || !sameType(x.dtype, {&x, &w, &y}) || !detail::rowMajor({&w}) ||
      (bias && !detail::rowMajor({bias})) || !convLayouts({&x, &y}))
    return false;
  ConvGeom g;
  if (!convGeom(x.shape, w.shape, y.shape, p, g))
    return false;
  if (bias && (bias->dtype != x.dtype || bias->shape != std::vector<int64_t>{g.M} ||
               (bias->data == nullptr && g.M != 0)))
    return false;
  if (onDnnl(x.dtype, g) && dnnlForward(g, p, x, w, bias, y, act))
    return true;
  RowMajorCopy xr(x), yr(y);
  dispatch(x.dtype, [&](auto t) {
    conv2dIm2col<decltype(t)>(g, p, xr.view, w, bias, yr.view, act);
    return true;
  });
  yr.back(y);
  return true;
}

} // namespace

//===--- Entry points -----------------------------------------------------===//

bool conv2d(const TensorView& x, const TensorView& w, const TensorView* bias, const TensorView& y,
            const Conv2dParams& p) {
  return conv2dAny(x, w, bias, y, p, {});
}

bool conv2dAct(const TensorView& x, const TensorView& w, const TensorView* bias,
               const TensorView& y, const Conv2dParams& p, const Activation& act) {
  return conv2dAny(x, w, bias, y, p, act);
}

bool conv2dGradInput(const TensorView& dy, const TensorView& w, const TensorView& dx,
                     const Conv2dParams& p) {
  if (detail::Float32Views::any({&dy, &w, &dx})) {
    detail::Float32Views f;
    return sameType(dy.dtype, {&dy, &w, &dx}) && conv2dGradInput(f.in(dy), f.in(w), f.out(dx), p) &&
           f.commit();
  }
  if (!isFloat(dy.dtype) || !sameType(dy.dtype, {&dy, &w, &dx}) || !detail::rowMajor({&w}) ||
      !convLayouts({&dy, &dx}))
    return false;
  ConvGeom g;
  if (!convGeom(dx.shape, w.shape, dy.shape, p, g))
    return false;
  if (onDnnl(dy.dtype, g) && dnnlBackwardData(g, p, dy, w, dx))
    return true;
  RowMajorCopy dyr(dy), dxr(dx);
  dispatch(dy.dtype, [&](auto t) {
    conv2dGradInputIm2col<decltype(t)>(g, p, dyr.view, w, dxr.view);
    return true;
  });
  dxr.back(dx);
  return true;
}

bool conv2dGradFilter(const TensorView& x, const TensorView& dy, const TensorView& dw,
                      const Conv2dParams& p) {
  if (detail::Float32Views::any({&x, &dy, &dw})) {
    detail::Float32Views f;
    return sameType(x.dtype, {&x, &dy, &dw}) && conv2dGradFilter(f.in(x), f.in(dy), f.out(dw), p) &&
           f.commit();
  }
  if (!isFloat(x.dtype) || !sameType(x.dtype, {&x, &dy, &dw}) || !detail::rowMajor({&dw}) ||
      !convLayouts({&x, &dy}))
    return false;
  ConvGeom g;
  if (!convGeom(x.shape, dw.shape, dy.shape, p, g))
    return false;
  if (onDnnl(x.dtype, g)) {
    if (!dnnlBackwardWeights(g, p, x, dy, dw)) {
      RowMajorCopy xr(x), dyr(dy);
      conv2dGradFilterBatched(g, p, xr.view, dyr.view, dw);
    }
    return true;
  }
  return dispatch(x.dtype, [&](auto t) {
    conv2dGradFilterIm2col<decltype(t)>(g, p, x, dy, dw);
    return true;
  });
}

} // namespace lwrt::cpu
