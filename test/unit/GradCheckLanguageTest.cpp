//===- GradCheckLanguageTest.cpp - Gradient rules of the language-model ops ===//
//
// gather_elements, scatter_elements (reduction none and add), nll_loss
// (every reduction, class weights, ignore_index, spatial dims) and
// softmax_xent over [N, T, V] logits with an ignore index, checked against
// central finite differences over random configurations (GradCheckCase.h).
//
//===----------------------------------------------------------------------===//
#include "GradCheckCase.h"

using namespace lwcc;
using namespace lwcc::test;

namespace {

/// Random indices of `is` into data of `ds` along `axis`, spelled negative
/// or not.
Ints randIndices(GradCase& c, const Shape& ds, const Shape& is, int64_t axis) {
  Ints idx(static_cast<size_t>(TensorType(DType::I64, is).numElements()));
  for (int64_t& v : idx)
    v = c.randInt(-ds[axis], ds[axis] - 1);
  return idx;
}

/// Indices of `is` along `axis` that never repeat within a line (a
/// scatter's overwritten updates have no gradient).
Ints distinctIndices(GradCase& c, const Shape& ds, const Shape& is, int64_t axis) {
  Ints idx(static_cast<size_t>(TensorType(DType::I64, is).numElements()));
  int64_t inner = 1;
  for (size_t d = axis + 1; d < is.size(); ++d)
    inner *= is[d];
  int64_t lines = static_cast<int64_t>(idx.size()) / is[axis];
  for (int64_t l = 0; l < lines; ++l) {
    int64_t o = l / inner, i = l % inner, shift = c.randInt(0, ds[axis] - 1);
    for (int64_t j = 0; j < is[axis]; ++j)
      idx[(o * is[axis] + j) * inner + i] = (j + shift) % ds[axis];
  }
  return idx;
}

/// A data shape, an axis and an indices shape no larger off the axis.
void randElements(GradCase& c, Shape& ds, Shape& is, int64_t& axis) {
  ds = c.randShape(1, 3, 3);
  axis = c.randInt(0, static_cast<int64_t>(ds.size()) - 1);
  is = ds;
  for (size_t d = 0; d < is.size(); ++d)
    is[d] = c.randInt(1, ds[d]);
}

TEST(GradCheck, GatherElements) {
  forSeeds(8, [](GradCase& c, int) {
    Shape ds, is;
    int64_t axis;
    randElements(c, ds, is, axis);
    Ints idx = randIndices(c, ds, is, axis);
    int64_t spelled = c.spellAxis(axis, static_cast<int64_t>(ds.size()));
    c.noteShape("data", ds).noteShape("indices", is).noteInts("", idx).note("axis ").note(spelled);
    c.test(OpKind::GatherElements, {c.param(ds), c.intConstant(is, idx)}, {{"axis", spelled}});
  });
}

TEST(GradCheck, ScatterElements) {
  // Seeds alternate reduction none (indices distinct within a line) and add
  // (repeats add up).
  forSeeds(8, [](GradCase& c, int seed) {
    Shape ds, is;
    int64_t axis;
    randElements(c, ds, is, axis);
    bool add = seed % 2 == 0;
    Ints idx = add ? randIndices(c, ds, is, axis) : distinctIndices(c, ds, is, axis);
    std::string reduction = add ? "add" : "none";
    c.noteShape("data", ds).noteShape("indices", is).noteInts("", idx).note("axis ").note(axis);
    c.note(" ").note(reduction);
    c.test(OpKind::ScatterElements, {c.param(ds), c.intConstant(is, idx), c.param(is)},
           {{"axis", axis}, {"reduction", Attribute(reduction)}});
  });
}

TEST(GradCheck, NllLoss) {
  // [N, C] and [N, C, d...]; each reduction; weights or none; an ignored
  // class (some targets equal to it) or none.
  forSeeds(12, [](GradCase& c, int seed) {
    int64_t n = c.randInt(1, 3), k = c.randInt(2, 4);
    Shape in{n, k}, ts{n};
    for (int64_t d = c.randInt(0, 2); d > 0; --d) {
      int64_t s = c.randInt(1, 3);
      in.push_back(s);
      ts.push_back(s);
    }
    const char* reductions[] = {"mean", "sum", "none"};
    std::string reduction = reductions[seed % 3];
    bool weighted = seed % 2 == 0, ignoring = seed % 4 < 2;
    Ints t(static_cast<size_t>(TensorType(DType::I64, ts).numElements()));
    for (int64_t& v : t)
      v = ignoring && c.randInt(0, 3) == 0 ? -100 : c.randInt(0, k - 1);
    t[0] = c.randInt(0, k - 1); // one target counts: a mean has a divisor
    std::vector<Value*> operands{c.param(in), c.intConstant(ts, t)};
    if (weighted) {
      std::vector<double> w;
      for (int64_t j = 0; j < k; ++j)
        w.push_back(0.5 + 0.25 * static_cast<double>(j));
      operands.push_back(c.floatConstant({k}, w));
    }
    std::vector<NamedAttr> attrs{{"reduction", Attribute(reduction)}};
    if (ignoring)
      attrs.push_back({"ignore_index", int64_t{-100}});
    c.noteShape("input", in)
        .noteInts("target", t)
        .note(reduction)
        .note(weighted ? " weighted" : "");
    c.test(OpKind::NllLoss, operands, attrs);
  });
}

TEST(GradCheck, SoftmaxXentSequence) {
  // Logits [N, T, V] with labels [N, T], some of them the ignore index.
  forSeeds(5, [](GradCase& c, int) {
    int64_t n = c.randInt(1, 3), t = c.randInt(1, 3), v = c.randInt(2, 5);
    Ints labels(static_cast<size_t>(n * t));
    for (int64_t& l : labels)
      l = c.randInt(0, 3) == 0 ? -100 : c.randInt(0, v - 1);
    labels[0] = c.randInt(0, v - 1);
    c.noteShape("logits", {n, t, v}).noteInts("labels", labels);
    c.test(OpKind::SoftmaxXent, {c.param({n, t, v}), c.intConstant({n, t}, labels)},
           {{"ignore_index", int64_t{-100}}});
  });
}

} // namespace
