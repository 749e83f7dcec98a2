//===- FusedKernels.cpp - The kernels of a trainer's fused ops ------------===//
#include "codegen/FusedKernels.h"

#include "codegen/Names.h"
#include "ir/Attribute.h"
#include "ir/FusedOps.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

namespace lwcc::codegen {

namespace {

bool narrow(DType t) { return t == DType::BF16 || t == DType::F16; }
/// The C type a value is computed in.
const char* computeType(DType t) { return t == DType::F64 ? "double" : "float"; }
/// The C type a tensor of `t` holds.
const char* storageType(DType t) {
  return t == DType::F64 ? "double" : narrow(t) ? "uint16_t" : "float";
}

std::string literal(double v) {
  if (std::isinf(v))
    return v < 0 ? "-HUGE_VAL" : "HUGE_VAL";
  return formatFloat(v);
}

/// The flat index of the element of an operand of shape `s` that element
/// `i` of the iteration space `space` reads (numpy broadcasting).
std::string indexOf(const Shape& s, const Shape& space) {
  if (s == space)
    return "i";
  int64_t elements = 1;
  for (int64_t d : s)
    elements *= d;
  if (elements == 1)
    return "0";
  const size_t rank = space.size(), offset = rank - s.size();
  std::vector<int64_t> spaceStride(rank, 1), stride(s.size(), 1);
  for (size_t d = rank; d-- > 1;)
    spaceStride[d - 1] = spaceStride[d] * space[d];
  for (size_t d = s.size(); d-- > 1;)
    stride[d - 1] = stride[d] * s[d];
  std::string out;
  for (size_t d = offset; d < rank; ++d) {
    if (s[d - offset] == 1)
      continue;
    std::string term = spaceStride[d] == 1 ? "i" : "i / " + std::to_string(spaceStride[d]);
    if (d > 0)
      term = "(" + term + ") % " + std::to_string(space[d]);
    if (stride[d - offset] != 1)
      term = "(" + term + ") * " + std::to_string(stride[d - offset]);
    if (!out.empty())
      out += " + ";
    out += term;
  }
  return out;
}

double attr(const FusedStatement& st, const char* name) {
  for (const NamedAttr& a : st.attrs)
    if (a.name == name)
      return a.value.kind() == AttrKind::Int ? static_cast<double>(a.value.getInt())
                                             : a.value.getFloat();
  const AttrSpec* spec = opInfo(st.kind).findAttr(name);
  return spec->defaultValue.getFloat();
}

/// The C expression of statement `st` over the values `a` and `b` of its
/// operands, as the runtime's kernel of its op computes one element (in
/// double where that kernel computes in double, rounded to the type);
/// "" when the op has no kernel form here.
std::string expressionOf(const FusedStatement& st, const std::string& a, const std::string& b) {
  const std::string t = computeType(st.dtype);
  const std::string zero = t + "(0)";
  switch (st.kind) {
  case OpKind::Add:
    return a + " + " + b;
  case OpKind::Sub:
    return a + " - " + b;
  case OpKind::Mul: // never contracted with an add into an fma: the unfused ops round each
    return "fusedMul(" + a + ", " + b + ")";
  case OpKind::Div:
    return a + " / " + b;
  case OpKind::Neg:
    return "-" + a;
  case OpKind::Relu:
    return a + " > " + zero + " ? " + a + " : " + zero;
  case OpKind::ReluGrad:
    return a + " > " + zero + " ? " + b + " : " + zero;
  case OpKind::Cast:
    return a; // rounded to the type below
  case OpKind::LeakyRelu:
    return t + "(double(" + a + ") >= 0 ? double(" + a + ") : " + literal(attr(st, "alpha")) +
           " * double(" + a + "))";
  case OpKind::Clip:
    return t + "(fusedClip(double(" + a + "), " + literal(attr(st, "min")) + ", " +
           literal(attr(st, "max")) + "))";
  case OpKind::LeakyReluGrad:
    return t + "(leakyReluGradValue(double(" + a + "), double(" + b + "), " +
           literal(attr(st, "alpha")) + "))";
  case OpKind::ClipGrad:
    return t + "(clipGradValue(double(" + a + "), double(" + b + "), " + literal(attr(st, "min")) +
           ", " + literal(attr(st, "max")) + "))";
  default:
    return "";
  }
}

/// An operand's dim `k` of the iteration space `space` (numpy broadcasting:
/// 1 where the operand has fewer dims).
int64_t dimIn(const Shape& s, const Shape& space, size_t k) {
  const size_t offset = space.size() - s.size();
  return k < offset ? 1 : s[k - offset];
}

/// Whether an operand of shape `s` has only 1s in the last `inner` dims of
/// `space`: it reads one element over them.
bool onesIn(const Shape& s, const Shape& space, size_t inner) {
  for (size_t k = space.size() - inner; k < space.size(); ++k)
    if (dimIn(s, space, k) != 1)
      return false;
  return true;
}

/// The innermost dims of `space` over which every operand is read either
/// element by element (it has all of them: its strides over them are
/// space's, so its elements there are consecutive) or at one element (it
/// broadcasts over all of them). A host loop then finds each operand's
/// element once per block of them and walks the block with no division per
/// element. 0 where the innermost dim alone mixes the two.
size_t blockDims(const Op& op, const Shape& space) {
  size_t dims = 0;
  for (size_t inner = 1; inner <= space.size(); ++inner) {
    for (const Value* v : op.operands()) {
      const Shape& s = v->type().shape;
      bool full = true;
      for (size_t k = space.size() - inner; k < space.size(); ++k)
        full &= dimIn(s, space, k) == space[k];
      if (!full && !onesIn(s, space, inner))
        return dims;
    }
    dims = inner;
  }
  return dims;
}

/// The flat index in `space` of element `x` of the sub-space of the dims
/// `pick` selects (row-major over them): how a reduction kernel finds the
/// first element of output `o` (the kept dims) and the j-th element it sums
/// (the reduced dims).
std::string subIndexOf(const std::string& x, const Shape& space, const std::vector<bool>& pick) {
  const size_t rank = space.size();
  std::vector<int64_t> spaceStride(rank, 1);
  for (size_t d = rank; d-- > 1;)
    spaceStride[d - 1] = spaceStride[d] * space[d];
  std::string out;
  int64_t inner = 1; // the sub-space's stride of dim d
  for (size_t d = rank; d-- > 0;) {
    if (!pick[d] || space[d] == 1)
      continue;
    std::string term = inner == 1 ? x : x + " / " + std::to_string(inner);
    inner *= space[d];
    term = "(" + term + ") % " + std::to_string(space[d]);
    if (spaceStride[d] != 1)
      term = "(" + term + ") * " + std::to_string(spaceStride[d]);
    out = out.empty() ? term : term + " + " + out;
  }
  return out.empty() ? "int64_t{0}" : out;
}

/// One kernel: its element function, and the function a trainer calls.
struct Kernel {
  std::string name;
  std::string text;
};

llvm::Expected<Kernel> renderKernel(const Op& op, const std::string& name, bool cuda) {
  auto body = parseFusedBody(op.getString("body"), op.numOperands());
  if (!body)
    return op.emitError("codegen: " + llvm::toString(body.takeError()));
  const Shape& space = op.getInts("shape");
  int64_t n = 1;
  for (int64_t d : space)
    n *= d;
  const std::vector<int64_t>& results = op.getInts("results");
  auto dims = reducedDims(*body, space);
  if (!dims)
    return op.emitError("codegen: " + llvm::toString(dims.takeError()));
  const bool reduces = !dims->empty();
  std::vector<size_t> reductions; // the reduction statements, in order
  for (size_t k = 0; k < body->size(); ++k)
    if (isReduction((*body)[k]))
      reductions.push_back(k);
  auto isReductionResult = [&](size_t r) {
    return isReduction((*body)[static_cast<size_t>(results[r])]);
  };
  // A reduction kernel's outputs (the reduced shape's elements) and the
  // elements each sums.
  int64_t outputs = 1, count = 1;
  for (size_t d = 0; reduces && d < space.size(); ++d)
    ((*dims)[d] ? count : outputs) *= space[d];
  std::ostringstream os;
  // The comment: what it computes.
  os << "// " << name << ": " << body->size() << " ops of the IR in one pass over "
     << TensorType(op.result()->type().dtype, space).str();
  if (!op.getString("layers").empty())
    os << " (" << op.getString("layers") << ")";
  os << ":\n";
  for (unsigned k = 0; k < op.numOperands(); ++k)
    os << "//   %" << k << ": " << op.operand(k)->type().str()
       << (op.operand(k)->type().shape == space ? "" : ", broadcast") << "\n";
  for (size_t k = 0; k < body->size(); ++k) {
    std::vector<FusedStatement> one{(*body)[k]};
    std::string text = printFusedBody(one);
    os << "//   %t" << k << text.substr(text.find(' ')) << "\n";
  }
  os << "//   results:";
  for (int64_t r : results)
    os << " %t" << r;
  os << "\n";
  if (reduces)
    os << "// Its reductions: " << outputs << " sums of " << count
       << " elements each, in a fixed order (one "
       << (cuda ? "block per sum, its threads striding over the elements, then a tree "
                  "in shared memory"
                : "thread per range of sums, each summed in element order")
       << "), accumulated in double; the elementwise results are written as the "
          "elements are visited.\n";
  // The element function: host and device.
  std::string params = "int64_t i";
  for (unsigned k = 0; k < op.numOperands(); ++k)
    params += std::string(", const ") + storageType(op.operand(k)->type().dtype) + "* p" +
              std::to_string(k);
  for (size_t r = 0; r < results.size(); ++r)
    params += std::string(", ") + storageType(op.result(static_cast<unsigned>(r))->type().dtype) +
              "* q" + std::to_string(r);
  // The element function adds each reduction's value at element i to its
  // accumulator s<m>.
  std::string sums;
  for (size_t m = 0; m < reductions.size(); ++m)
    sums += ", double& s" + std::to_string(m);
  // A host loop walks blocks of the innermost dims (blockDims): its
  // element function reads an operand at element i of the block or at its
  // one element there, the pointers set at the block's start.
  const size_t inner = cuda || reduces ? 0 : blockDims(op, space);
  int64_t block = 1;
  for (size_t k = space.size() - inner; k < space.size(); ++k)
    block *= space[k];
  const bool blocked = block > 1;
  os << "LWRT_FUSED_ELEMENT void " << name << "_at(" << params << sums << ") {\n";
  for (unsigned k = 0; k < op.numOperands(); ++k) {
    const TensorType& t = op.operand(k)->type();
    std::string index = indexOf(t.shape, space);
    if (blocked)
      index = onesIn(t.shape, space, inner) ? "0" : "i";
    const std::string at = "p" + std::to_string(k) + "[" + index + "]";
    const std::string load = t.dtype == DType::BF16  ? "bf16ToFloat(" + at + ")"
                             : t.dtype == DType::F16 ? "f16ToFloat(" + at + ")"
                                                     : at;
    os << "  const " << computeType(t.dtype) << " v" << k << " = " << load << ";\n";
  }
  for (size_t k = 0; k < body->size(); ++k) {
    const FusedStatement& st = (*body)[k];
    auto value = [&](size_t a) {
      if (a >= st.args.size())
        return std::string();
      const int arg = st.args[a];
      return arg >= 0 ? "t" + std::to_string(arg) : "v" + std::to_string(-arg - 1);
    };
    if (isReduction(st)) {
      const auto m = std::find(reductions.begin(), reductions.end(), k) - reductions.begin();
      os << "  s" << m << " += double(" << value(0) << ");\n";
      continue;
    }
    std::string e = expressionOf(st, value(0), value(1));
    if (e.empty())
      return op.emitError("codegen: a fused kernel has no form of " +
                          std::string(opInfo(st.kind).mnemonic));
    // Rounded to the statement's type, as its kernel stores it; relu, neg
    // and relu_grad of values of that type give values of it.
    bool exact = st.kind == OpKind::Relu || st.kind == OpKind::Neg || st.kind == OpKind::ReluGrad;
    for (int arg : st.args)
      exact &= (arg >= 0 ? (*body)[static_cast<size_t>(arg)].dtype
                         : op.operand(static_cast<unsigned>(-arg - 1))->type().dtype) == st.dtype;
    const std::string t = computeType(st.dtype);
    if (st.dtype == DType::BF16 && !exact)
      e = "roundToBf16(float(" + e + "))";
    else if (st.dtype == DType::F16 && !exact)
      e = "roundToF16(float(" + e + "))";
    else if (st.kind == OpKind::Cast)
      e = t + "(" + e + ")";
    os << "  const " << t << " t" << k << " = " << e << ";\n";
  }
  for (size_t r = 0; r < results.size(); ++r) {
    if (isReductionResult(r))
      continue; // written once per sum by the kernel or loop
    const DType t = op.result(static_cast<unsigned>(r))->type().dtype;
    const std::string v = "t" + std::to_string(results[r]);
    os << "  q" << r << "[i] = "
       << (t == DType::BF16  ? "floatToBf16(" + v + ")"
           : t == DType::F16 ? "floatToF16(" + v + ")"
                             : v)
       << ";\n";
  }
  os << "}\n";
  // The pointers of the views, and the call.
  std::string views, pointers, args;
  for (unsigned k = 0; k < op.numOperands(); ++k) {
    const char* t = storageType(op.operand(k)->type().dtype);
    if (k)
      views += ", ";
    views += "const TensorView& x";
    views += std::to_string(k);
    pointers += std::string("  const ") + t + "* p" + std::to_string(k) + " = static_cast<const " +
                t + "*>(x" + std::to_string(k) + ".data);\n";
    args += ", p" + std::to_string(k);
  }
  for (size_t r = 0; r < results.size(); ++r) {
    const char* t = storageType(op.result(static_cast<unsigned>(r))->type().dtype);
    views += ", const TensorView& y" + std::to_string(r);
    pointers += std::string("  ") + t + "* q" + std::to_string(r) + " = static_cast<" + t + "*>(y" +
                std::to_string(r) + ".data);\n";
    args += ", q" + std::to_string(r);
  }
  if (reduces) {
    // Element j of sum o: the kept dims' index of o plus the reduced dims'
    // index of j.
    std::vector<bool> kept(dims->size());
    for (size_t d = 0; d < kept.size(); ++d)
      kept[d] = !(*dims)[d];
    os << "LWRT_FUSED_ELEMENT int64_t " << name << "_base(int64_t o) { return "
       << subIndexOf("o", space, kept) << "; }\n";
    os << "LWRT_FUSED_ELEMENT int64_t " << name << "_offset(int64_t j) { return "
       << subIndexOf("j", space, *dims) << "; }\n";
    std::string zero, sumArgs, store;
    for (size_t m = 0; m < reductions.size(); ++m) {
      zero += m ? ", s" : "s";
      zero += std::to_string(m);
      zero += " = 0";
      sumArgs += ", s" + std::to_string(m);
    }
    auto storeSums = [&](const std::string& indent, const std::function<std::string(size_t)>& of) {
      std::string out;
      for (size_t r = 0; r < results.size(); ++r) {
        if (!isReductionResult(r))
          continue;
        const auto m =
            std::find(reductions.begin(), reductions.end(), static_cast<size_t>(results[r])) -
            reductions.begin();
        out += indent + "q" + std::to_string(r) +
               "[o] = " + storageType(op.result(static_cast<unsigned>(r))->type().dtype) + "(" +
               of(static_cast<size_t>(m)) + ");\n";
      }
      return out;
    };
    if (cuda) {
      const std::string part = name + "_part";
      os << "static __global__ void " << name << "_kernel(int64_t m" << params.substr(9) << ") {\n"
         << "  __shared__ double " << part << "[" << reductions.size()
         << "][::lwrt::cuda::kFusedThreads];\n"
         << "  for (int64_t o = blockIdx.x; o < m; o += gridDim.x) {\n"
         << "    const int64_t base = " << name << "_base(o);\n"
         << "    double " << zero << ";\n"
         << "    for (int64_t j = threadIdx.x; j < " << count
         << "; j += ::lwrt::cuda::kFusedThreads)\n"
         << "      " << name << "_at(base + " << name << "_offset(j)" << args << sumArgs << ");\n";
      for (size_t m = 0; m < reductions.size(); ++m)
        os << "    " << part << "[" << m << "][threadIdx.x] = s" << m << ";\n";
      os << "    __syncthreads();\n"
         << "    for (unsigned half = ::lwrt::cuda::kFusedThreads / 2; half > 0; half >>= 1) {\n"
         << "      if (threadIdx.x < half) {\n";
      for (size_t m = 0; m < reductions.size(); ++m)
        os << "        " << part << "[" << m << "][threadIdx.x] += " << part << "[" << m
           << "][threadIdx.x + half];\n";
      os << "      }\n      __syncthreads();\n    }\n"
         << "    if (threadIdx.x == 0) {\n"
         << storeSums("      ", [&](size_t m) { return part + "[" + std::to_string(m) + "][0]"; })
         << "    }\n    __syncthreads(); // the parts are reused by the next sum\n  }\n}\n";
      os << "[[maybe_unused]] static bool " << name << "(" << views << ") {\n"
         << pointers << "  LWRT_FUSED_REDUCE_LAUNCH(" << name << "_kernel, "
         << std::min<int64_t>(outputs, 65536) << ", int64_t{" << outputs << "}" << args << ");\n"
         << "  return fusedLaunched(\"" << name << "\");\n}\n\n";
    } else {
      os << "LWRT_FUSED_LOOP void " << name << "_range(int64_t first, int64_t last"
         << params.substr(9) << ") {\n"
         << "  for (int64_t o = first; o < last; ++o) {\n"
         << "    const int64_t base = " << name << "_base(o);\n"
         << "    double " << zero << ";\n"
         << "    for (int64_t j = 0; j < " << count << "; ++j)\n"
         << "      " << name << "_at(base + " << name << "_offset(j)" << args << sumArgs << ");\n"
         << storeSums("    ",
                      [](size_t m) {
                        std::string s = "s";
                        s += std::to_string(m);
                        return s;
                      })
         << "  }\n}\n";
      os << "[[maybe_unused]] static bool " << name << "(" << views << ") {\n"
         << pointers << "  return fusedFor(" << outputs << ", [=](int64_t first, int64_t last) {\n"
         << "    " << name << "_range(first, last" << args << ");\n  });\n}\n\n";
    }
  } else if (cuda) {
    os << "static __global__ void " << name << "_kernel(int64_t n" << params.substr(9) << ") {\n"
       << "  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;\n"
       << "       i += static_cast<int64_t>(gridDim.x) * blockDim.x)\n"
       << "    " << name << "_at(i" << args << ");\n}\n";
    os << "[[maybe_unused]] static bool " << name << "(" << views << ") {\n"
       << pointers << "  LWRT_FUSED_LAUNCH(" << name << "_kernel, " << n << ", int64_t{" << n << "}"
       << args << ");\n"
       << "  return fusedLaunched(\"" << name << "\");\n}\n\n";
  } else {
    // The thread's range: element by element, or (blocked) in pieces that
    // stay within a block of `block` elements, each operand's first element
    // of a piece found once. A function of its own, flattened: its element
    // function and the value helpers it calls inlined at -O3 into the loop.
    std::string loop;
    if (!blocked) {
      loop = "  for (int64_t i = first; i < last; ++i)\n    " + name + "_at(i" + args + ");\n";
    } else {
      std::string starts, blockArgs;
      for (unsigned k = 0; k < op.numOperands(); ++k) {
        const std::string idx = indexOf(op.operand(k)->type().shape, space);
        starts += "    const auto* a" + std::to_string(k) + " = p" + std::to_string(k) +
                  (idx == "0" ? std::string() : " + (" + idx + ")") + ";\n";
        blockArgs += ", a" + std::to_string(k);
      }
      for (size_t r = 0; r < results.size(); ++r) {
        starts += "    auto* b" + std::to_string(r) + " = q" + std::to_string(r) + " + i;\n";
        blockArgs += ", b" + std::to_string(r);
      }
      loop =
          "  for (int64_t i = first; i < last;) {\n    const int64_t end = std::min(last, (i / " +
          std::to_string(block) + " + 1) * " + std::to_string(block) + ");\n" + starts +
          "    for (int64_t j = 0, m = end - i; j < m; ++j)\n      " + name + "_at(j" + blockArgs +
          ");\n    i = end;\n  }\n";
    }
    os << "LWRT_FUSED_LOOP void " << name << "_range(int64_t first, int64_t last"
       << params.substr(9) << ") {\n"
       << loop << "}\n";
    os << "[[maybe_unused]] static bool " << name << "(" << views << ") {\n"
       << pointers << "  return fusedFor(" << n << ", [=](int64_t first, int64_t last) {\n"
       << "    " << name << "_range(first, last" << args << ");\n  });\n}\n\n";
  }
  return Kernel{name, os.str()};
}

} // namespace

llvm::Expected<FusedKernels> FusedKernels::render(const Graph& g, bool cuda) {
  FusedKernels out;
  std::map<std::string, std::string> byKey; // body and types -> kernel name
  std::string text;
  int count = 0;
  for (const auto& op : g.ops()) {
    if (op->kind() != OpKind::Fused)
      continue;
    std::string key = op->getString("body");
    key += '|';
    key += TensorType(DType::F32, op->getInts("shape")).str();
    for (const Value* v : op->operands()) {
      key += '|';
      key += v->type().str();
    }
    for (int64_t r : op->getInts("results")) {
      key += '|';
      key += std::to_string(r);
    }
    if (auto it = byKey.find(key); it != byKey.end()) {
      out.names_[op.get()] = it->second;
      continue;
    }
    std::string layer = op->getString("layers");
    layer = identifier(layer.substr(0, layer.find(',')));
    if (layer.size() > 32)
      layer.resize(32);
    const std::string name =
        "fused_" + (layer.empty() ? std::string("region") : layer) + "_" + std::to_string(count++);
    auto kernel = renderKernel(*op, name, cuda);
    if (!kernel)
      return kernel.takeError();
    text += kernel->text;
    byKey[key] = name;
    out.names_[op.get()] = name;
  }
  if (!text.empty()) {
    // Host loops at -O3 whatever the trainer's flags (it builds at -Og:
    // its other code is calls into the runtime).
    out.text_ = "// The fused kernels (passes/Fuse.cpp): each computes several ops of the IR\n"
                "// in one pass over memory.\n";
    if (!cuda)
      out.text_ += "#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC push_options\n"
                   "#pragma GCC optimize(\"O3\")\n#endif\n";
    out.text_ += text;
    if (!cuda)
      out.text_ +=
          "#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC pop_options\n#endif\n";
    out.text_ += "\n";
  }
  return out;
}

} // namespace lwcc::codegen
