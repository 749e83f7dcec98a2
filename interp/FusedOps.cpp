//===- FusedOps.cpp - The interpreter's fused regions ---------------------===//
//
// A fused op runs as the ops of its body, each as the interpreter runs it
// alone and rounded to its type, so a region computes exactly what its ops
// computed before fusion (and its generated kernels are checked against
// that).
//
//===----------------------------------------------------------------------===//
#include "interp/Eval.h"
#include "interp/Interpreter.h"
#include "ir/FusedOps.h"

namespace lwcc {

llvm::Error evalFused(EvalCtx& c) {
  auto body = fusedBodyGraph(c.op);
  if (!body)
    return body.takeError();
  std::vector<Tensor> inputs;
  for (const Tensor* t : c.in)
    inputs.push_back(*t);
  auto results = interpret(**body, inputs, {}, c.float64 ? Precision::F64 : Precision::F32);
  if (!results)
    return results.takeError();
  for (size_t k = 0; k < results->size(); ++k)
    c.out[k] = std::move((*results)[k]);
  return llvm::Error::success();
}

} // namespace lwcc
