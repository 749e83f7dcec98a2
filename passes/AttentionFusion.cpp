//===- AttentionFusion.cpp - Scaled dot-product attention as one op -------===//
//
// Finds attention as the exporters spell it and writes one attention op in
// its place (ir/AttentionOps.cpp):
//
//   s = matmul(q, transpose(k))          the last two dims of k swapped
//   s = mul(s, c) | div(s, c)            scalar constants, any number; also
//                                        on q and on k or k^T before the
//                                        matmul (PyTorch's sqrt(scale) on each)
//   s = add(s, m) | add(m, s)            an additive mask: a constant of 0
//                                        and -inf below the diagonal only,
//                                        or where(lower triangle, 0, -inf),
//                                        each maybe expanded to the batch,
//                                        becomes causal = 1, a mask of
//                                        zeros none, others the mask
//   s = where(cond, s, fill)             fill a scalar constant of -inf (or
//                                        below -1e30): a constant lower
//                                        triangle becomes causal = 1, others
//                                        the mask where(cond, 0, fill)
//   p = softmax(s, axis = -1)
//   o = matmul(p, v)
//
// It rewrites only when every intermediate (the scores, their scaled and
// masked forms, the softmax) has no reader outside the pattern, and when
// q, k, v and the mask fit attention's shape rule (one set of leading
// dims); anything else is left as it is.
//
//===----------------------------------------------------------------------===//
#include "ir/IR.h"
#include "passes/Pass.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace lwcc {

namespace {

/// The op defining `v` when it is of `kind` and `v` has exactly one use.
Op* soleDef(Value* v, OpKind kind) {
  Op* d = v->definingOp();
  if (!d || d->kind() != kind || v->uses().size() != 1)
    return nullptr;
  return d;
}

/// The value of a float scalar constant (any shape of one element).
std::optional<double> scalarConstant(Value* v) {
  Op* d = v->definingOp();
  if (!d || d->kind() != OpKind::Constant || !isFloat(v->type().dtype) ||
      v->type().numElements() != 1)
    return std::nullopt;
  return d->getFloats("value")[0];
}

/// The values of a constant, or empty when `v` is not a constant.
std::vector<double> constantValues(Value* v) {
  Op* d = v->definingOp();
  if (!d || d->kind() != OpKind::Constant)
    return {};
  int64_t n = v->type().numElements();
  std::vector<double> out(static_cast<size_t>(n));
  if (isFloat(v->type().dtype)) {
    const auto& f = d->getFloats("value");
    for (int64_t k = 0; k < n; ++k)
      out[k] = f.size() == 1 ? f[0] : f[k];
  } else {
    const auto& i = d->getInts("ivalue");
    for (int64_t k = 0; k < n; ++k)
      out[k] = static_cast<double>(i.size() == 1 ? i[0] : i[k]);
  }
  return out;
}

/// Whether constant `v`, of shape [..., T, T], marks exactly the keys
/// j > i of each query i, in every leading slice: `masked(x)` says whether
/// a value masks.
template <typename Fn> bool isCausalConstant(Value* v, int64_t tq, int64_t tk, Fn masked) {
  const Shape& s = v->type().shape;
  if (s.size() < 2 || tq != tk || s[s.size() - 2] != tq || s.back() != tk)
    return false;
  std::vector<double> x = constantValues(v);
  if (x.empty())
    return false;
  for (size_t at = 0; at < x.size(); at += static_cast<size_t>(tq * tk))
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = 0; j < tk; ++j)
        if (masked(x[at + static_cast<size_t>(i * tk + j)]) != (j > i))
          return false;
  return true;
}

/// A fill that masks a score: -inf, or a float's lowest (HF's finfo.min).
bool isMaskingFill(double f) { return f <= -1e30; }

/// `v`, or the operand of the expand that makes it when that expand keeps
/// the last two dims (it only adds or broadcasts leading ones: the
/// transformers exports' causal mask, one [1, 1, T, T] constant expanded to
/// the batch).
Value* throughExpand(Value* v) {
  Op* d = v->definingOp();
  if (!d || d->kind() != OpKind::Expand)
    return v;
  const Shape &in = d->operand(0)->type().shape, &out = v->type().shape;
  if (in.size() < 2 || out.size() < 2 || in[in.size() - 1] != out[out.size() - 1] ||
      in[in.size() - 2] != out[out.size() - 2])
    return v;
  return d->operand(0);
}

/// Whether the condition `cond` of a where(cond, scores, fill) keeps
/// exactly the keys j <= i of each query i.
bool isCausalCondition(Value* cond, int64_t tq, int64_t tk) {
  return isCausalConstant(throughExpand(cond), tq, tk, [](double x) { return x == 0; });
}

/// Whether the additive mask `m` is zero everywhere: a constant of zeros,
/// or one times a finite scalar constant (transformers' BERT without an
/// attention mask: (1 - ones) * finfo.min, folded to zeros times the
/// fill). Adding it changes no score (x + -0 is x): no mask.
bool isZeroMask(Value* m) {
  auto zeros = [](Value* v) {
    std::vector<double> x = constantValues(v);
    return !x.empty() && std::all_of(x.begin(), x.end(), [](double e) { return e == 0; });
  };
  if (zeros(m))
    return true;
  Op* d = m->definingOp();
  if (!d || d->kind() != OpKind::Mul)
    return false;
  for (unsigned i = 0; i < 2; ++i) {
    std::optional<double> c = scalarConstant(d->operand(1 - i));
    if (c && std::isfinite(*c) && zeros(d->operand(i)) &&
        d->operand(i)->type().shape == m->type().shape)
      return true;
  }
  return false;
}

/// Whether the additive mask `m` is where(cond, 0, fill) of a causal
/// condition and a masking fill (transformers' GPT-2 and Llama: the mask
/// made once for every layer from a constant lower triangle). A masked
/// score then adds the fill, its softmax weight is exactly 0, and so is
/// every term it brings to the sums: causal = 1 computes the same.
bool isCausalWhereMask(Value* m, int64_t tq, int64_t tk) {
  Op* w = m->definingOp();
  if (!w || w->kind() != OpKind::Where)
    return false;
  std::optional<double> zero = scalarConstant(w->operand(1)), fill = scalarConstant(w->operand(2));
  return zero && *zero == 0 && fill && isMaskingFill(*fill) &&
         isCausalCondition(w->operand(0), tq, tk);
}

/// Whether `perm` swaps the last two dims and keeps the others.
bool swapsLastTwo(const Op& t) {
  const auto& p = t.getInts("perm");
  int64_t r = static_cast<int64_t>(p.size());
  if (r < 2)
    return false;
  for (int64_t d = 0; d + 2 < r; ++d)
    if (p[d] != d)
      return false;
  return p[r - 2] == r - 1 && p[r - 1] == r - 2;
}

/// Peels scalar mul/div constants off `v` (each value used once), folding
/// them into `scale`.
Value* peelScale(Value* v, double& scale, std::vector<Op*>& dead) {
  for (;;) {
    Op* d = v->definingOp();
    if (!d || (d->kind() != OpKind::Mul && d->kind() != OpKind::Div) || v->uses().size() != 1)
      return v;
    std::optional<double> c = scalarConstant(d->operand(1));
    Value* rest = d->operand(0);
    if (!c && d->kind() == OpKind::Mul) {
      c = scalarConstant(d->operand(0));
      rest = d->operand(1);
    }
    if (!c || rest->type().shape != v->type().shape)
      return v;
    scale = d->kind() == OpKind::Mul ? scale * *c : scale / *c;
    dead.push_back(d);
    v = rest;
  }
}

/// Whether `v`, of `shape`, is the scores q k^T after scales and masks.
bool leadsToScores(Value* v, const Shape& shape, int depth) {
  if (depth > 8 || v->type().shape != shape || v->uses().size() != 1)
    return false;
  double unused = 1;
  std::vector<Op*> d;
  v = peelScale(v, unused, d);
  Op* def = v->definingOp();
  if (!def)
    return false;
  if (def->kind() == OpKind::MatMul)
    return true;
  if (def->kind() == OpKind::Where)
    return leadsToScores(def->operand(1), shape, depth + 1);
  if (def->kind() == OpKind::Add)
    return leadsToScores(def->operand(0), shape, depth + 1) ||
           leadsToScores(def->operand(1), shape, depth + 1);
  return false;
}

/// K^T as the dynamo exporter writes it for a [..., T, D] key: reshaped to
/// [N, T, D] (the leading dims flattened), transposed (perm [0, 2, 1]) and
/// reshaped back to [..., D, T]: the key, or null.
Value* flattenedTranspose(Value* kt, std::vector<Op*>& dead) {
  Op* back = soleDef(kt, OpKind::Reshape);
  Op* t = back ? soleDef(back->operand(0), OpKind::Transpose) : nullptr;
  Op* flat = t && swapsLastTwo(*t) ? soleDef(t->operand(0), OpKind::Reshape) : nullptr;
  if (!flat)
    return nullptr;
  Value* k = flat->operand(0);
  const Shape& ks = k->type().shape;
  Shape want = ks;
  if (want.size() < 3)
    return nullptr;
  std::swap(want[want.size() - 1], want[want.size() - 2]);
  int64_t lead = 1;
  for (size_t i = 0; i + 2 < ks.size(); ++i)
    lead *= ks[i];
  if (kt->type().shape != want ||
      flat->result()->type().shape != Shape{lead, ks[ks.size() - 2], ks.back()})
    return nullptr;
  dead.insert(dead.end(), {back, t, flat});
  return k;
}

/// The dynamo exporter's NaN-safe softmax, where(isnan(p), 0, p) with isnan
/// as compare(xor(equal(p, p), true)): the where op reading `p` (the
/// attention op's rows are never NaN: a row that masks every key is zero),
/// with its compares added to `dead`; or null.
Op* nanSafeWhere(Value* p, std::vector<Op*>& dead) {
  if (p->uses().size() != 3)
    return nullptr;
  Op* eq = nullptr;
  Op* where = nullptr;
  for (const Use& u : p->uses()) {
    if (u.user->kind() == OpKind::Compare && u.user->getString("kind") == "equal" &&
        u.user->operand(0) == p && u.user->operand(1) == p)
      eq = u.user;
    else if (u.user->kind() == OpKind::Where && u.index == 2)
      where = u.user;
  }
  Op* neg = eq ? soleDef(where ? where->operand(0) : nullptr, OpKind::Compare) : nullptr;
  std::optional<double> zero = where ? scalarConstant(where->operand(1)) : std::nullopt;
  if (!neg || neg->getString("kind") != "xor" || neg->operand(0) != eq->result() ||
      eq->result()->uses().size() != 1 || !zero || *zero != 0)
    return nullptr;
  dead.insert(dead.end(), {where, neg, eq});
  return where;
}

class AttentionFusionPass : public Pass {
public:
  std::string_view name() const override { return "fuse-attention"; }

  llvm::Error run(Graph& g, PassContext&) override {
    std::vector<Op*> softmaxes;
    for (auto& op : g.ops())
      if (op->kind() == OpKind::Softmax)
        softmaxes.push_back(op.get());
    for (Op* sm : softmaxes)
      if (llvm::Error e = tryFuse(g, sm))
        return e;
    return llvm::Error::success();
  }

private:
  llvm::Error tryFuse(Graph& g, Op* sm) {
    Value* p = sm->result();
    int64_t rank = p->type().rank();
    int64_t axis = sm->getInt("axis");
    if (rank < 2 || (axis != -1 && axis != rank - 1))
      return llvm::Error::success();
    std::vector<Op*> safe;
    Value* probs = p;
    if (Op* w = nanSafeWhere(p, safe))
      probs = w->result();
    if (probs->uses().size() != 1)
      return llvm::Error::success();
    Op* pv = probs->uses()[0].user;
    if (!pv || pv->kind() != OpKind::MatMul || probs->uses()[0].index != 0)
      return llvm::Error::success();
    std::vector<Op*> dead{pv};
    dead.insert(dead.end(), safe.begin(), safe.end());
    dead.push_back(sm);
    Value* s = sm->operand(0);
    int64_t tq = s->type().shape[rank - 2], tk = s->type().shape[rank - 1];
    int64_t causal = 0;
    double scale = 1.0;
    // The masks, outermost first: where(cond, s, fill) and add(s, m) in
    // any order and number.
    std::vector<Value*> masks;
    std::vector<std::pair<Value*, double>> wheres;
    for (;;) {
      if (Op* w = soleDef(s, OpKind::Where)) {
        std::optional<double> f = scalarConstant(w->operand(2));
        if (!f || !isMaskingFill(*f) || w->operand(1)->type().shape != s->type().shape)
          return llvm::Error::success();
        Value* cond = w->operand(0);
        if (isCausalCondition(cond, tq, tk))
          causal = 1;
        else
          wheres.push_back({cond, *f});
        dead.push_back(w);
        s = w->operand(1);
      } else if (Op* a = soleDef(s, OpKind::Add)) {
        // The scores are the operand of s's shape that leads to q k^T.
        unsigned si = leadsToScores(a->operand(0), s->type().shape, 0)   ? 0
                      : leadsToScores(a->operand(1), s->type().shape, 0) ? 1
                                                                         : 2;
        if (si == 2)
          return llvm::Error::success();
        Value* m = a->operand(1 - si);
        if (isCausalConstant(throughExpand(m), tq, tk, [](double x) { return isMaskingFill(x); }) ||
            isCausalWhereMask(m, tq, tk))
          causal = 1;
        else if (!isZeroMask(m)) // a mask of zeros: none
          masks.push_back(m);
        dead.push_back(a);
        s = a->operand(si);
      } else {
        break;
      }
    }
    s = peelScale(s, scale, dead);
    Op* qk = soleDef(s, OpKind::MatMul);
    if (!qk)
      return llvm::Error::success();
    dead.push_back(qk);
    Value* q = peelScale(qk->operand(0), scale, dead);
    Value* kt = peelScale(qk->operand(1), scale, dead);
    Value* k = nullptr;
    if (Op* t = soleDef(kt, OpKind::Transpose); t && swapsLastTwo(*t)) {
      dead.push_back(t);
      k = peelScale(t->operand(0), scale, dead);
    } else if (Value* flat = flattenedTranspose(kt, dead)) {
      k = peelScale(flat, scale, dead);
    } else {
      return llvm::Error::success();
    }
    Value* v = pv->operand(1);
    // One set of leading dims, as attention's shape rule wants.
    if (q->type().rank() != rank || k->type().rank() != rank || v->type().rank() != rank ||
        q->type().dtype != p->type().dtype || k->type().dtype != q->type().dtype ||
        v->type().dtype != q->type().dtype)
      return llvm::Error::success();
    for (Value* m : masks)
      if (m->type().dtype != q->type().dtype)
        return llvm::Error::success();
    Builder b(g);
    b.setInsertionPointBefore(pv);
    b.setLoc(pv->loc());
    // where(cond, 0, fill): the additive form of each where's mask; then
    // the masks' sum.
    DType dt = q->type().dtype;
    for (auto& [cond, fill] : wheres) {
      Op* zero = b.create(OpKind::Constant, {}, {TensorType(dt, {})},
                          {{"value", Attribute(std::vector<double>{0.0})}});
      Op* f = b.create(OpKind::Constant, {}, {TensorType(dt, {})},
                       {{"value", Attribute(std::vector<double>{fill})}});
      auto m = b.createInferred(OpKind::Where, {cond, zero->result(), f->result()});
      if (!m)
        return m.takeError();
      masks.push_back((*m)->result());
    }
    Value* mask = nullptr;
    for (Value* m : masks) {
      if (m->type().dtype != dt)
        return llvm::Error::success(); // checked below before anything is written
      if (!mask) {
        mask = m;
        continue;
      }
      auto sum = b.createInferred(OpKind::Add, {mask, m});
      if (!sum)
        return sum.takeError();
      mask = (*sum)->result();
    }
    std::vector<Value*> operands{q, k, v};
    if (mask)
      operands.push_back(mask);
    std::vector<NamedAttr> attrs{{"scale", Attribute(scale)}};
    if (causal)
      attrs.push_back({"causal", Attribute(causal)});
    auto att = b.createInferred(OpKind::Attention, operands, attrs, 2);
    if (!att) {
      // Shapes attention does not take (broadcast leading dims): leave it.
      llvm::consumeError(att.takeError());
      return llvm::Error::success();
    }
    Op* a = *att;
    if (a->result(0)->type() != pv->result()->type()) {
      g.eraseOp(a);
      return llvm::Error::success();
    }
    pv->result()->replaceAllUsesWith(a->result(0));
    // The pattern's ops, last first; scale constants with no other use go too.
    std::set<Op*> consts;
    for (Op* d : dead) {
      for (Value* o : d->operands())
        if (o->definingOp() && o->definingOp()->kind() == OpKind::Constant)
          consts.insert(o->definingOp());
      g.eraseOp(d);
    }
    for (Op* c : consts)
      if (!c->hasUsedResults())
        g.eraseOp(c);
    return llvm::Error::success();
  }
};

} // namespace

std::unique_ptr<Pass> createAttentionFusionPass() {
  return std::make_unique<AttentionFusionPass>();
}

} // namespace lwcc
