//===- SourceFiles.cpp - The trainer's source files and weights blob ------===//
#include "codegen/SourceFiles.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cstring>

namespace lwcc::codegen {

FunctionText::FunctionText(std::string name, std::string text)
    : name(std::move(name)), text(std::move(text)) {
  for (size_t at = 0; (at = this->text.find("RUN_OP(", at)) != std::string::npos; at += 7)
    ++ops;
}

namespace {

size_t totalOps(const std::vector<FunctionText>& fns) {
  size_t n = 0;
  for (const FunctionText& f : fns)
    n += f.ops;
  return n;
}

} // namespace

bool splitsSources(const std::vector<FunctionText>& fns, size_t opsPerFile) {
  return opsPerFile > 0 && totalOps(fns) > opsPerFile;
}

std::string sharedDefinitions(const char* ns, const SharedSizes& sizes, const std::string& shapes,
                              const std::string& offsets, bool split) {
  const char* inl = split ? "inline " : "";
  std::string out;
  out += "using namespace lwrt;\nusing namespace lwrt::" + std::string(ns) + ";\n\n";
  out += "[[maybe_unused]] constexpr double kInf = std::numeric_limits<double>::infinity();\n\n";
  out += llvm::formatv("constexpr int64_t kArenaBytes = {0};\n", sizes.arena).str();
  out += llvm::formatv("constexpr int64_t kStateBytes = {0};\n", sizes.state).str();
  out += llvm::formatv("constexpr int64_t kInputBytes = {0};\n", sizes.input).str();
  out += llvm::formatv("constexpr int64_t kEvalArenaBytes = {0};\n\n", sizes.evalArena).str();
  out += "using Shape = std::vector<int64_t>;\n\n";
  out += "// The tensor of `shape` at `offset` in a buffer.\n";
  out += std::string(inl) +
         "TensorView at(unsigned char* base, int64_t offset, DType t, Shape shape,\n";
  out += std::string(split ? 7 : 0, ' ');
  out += "                Layout layout = Layout::RowMajor) {\n"
         "  return TensorView{base + offset, t, std::move(shape), layout};\n}\n\n"
         "// A runtime call of op NAME (a string literal): when it fails, the\n"
         "// function stops and reports NAME.\n"
         "#define CHECK_OP(call, name)                                                   \\\n"
         "  do {                                                                         \\\n"
         "    if (!(call))                                                               \\\n"
         "      return *failed = (name), false;                                          \\\n"
         "  } while (0)\n"
         "// The end of op NAME, of IR kind OP, for --profile.\n"
         "#define MARK_OP(op, name)                                                      \\\n"
         "  do {                                                                         \\\n"
         "    if (b.mark)                                                                \\\n"
         "      b.mark(b.markContext, op \" \" name);                                      \\\n"
         "  } while (0)\n"
         "// A step op's runtime call: checked, counted, then marked.\n"
         "#define RUN_OP(call, op, name)                                                 \\\n"
         "  do {                                                                         \\\n"
         "    CHECK_OP(call, name);                                                      \\\n"
         "    if (b.calls)                                                               \\\n"
         "      ++*b.calls;                                                              \\\n"
         "    MARK_OP(op, name);                                                         \\\n"
         "  } while (0)\n\n";
  out += "// The shapes of the views.\n" + shapes + "\n" + offsets;
  return out;
}

std::vector<SourceFile> assembleSources(const SourceParts& parts,
                                        const std::vector<FunctionText>& fns, size_t opsPerFile,
                                        const std::string& modelName, bool cuda) {
  std::vector<SourceFile> out;
  const std::string ext = cuda ? ".cu" : ".cc";
  const size_t ops = totalOps(fns);
  if (!splitsSources(fns, opsPerFile)) {
    std::string text =
        parts.about + parts.includes + parts.blobs + "namespace {\n\n" + parts.shared;
    for (const FunctionText& f : fns)
      text += f.text;
    out.push_back({"trainer" + ext, text + "} // namespace\n\n" + parts.main});
  } else {
    // As many files as opsPerFile asks for, of about equal ops, the
    // functions in order; trainer.h holds what they share, trainer.cc the
    // model description and main.
    const size_t files = (ops + opsPerFile - 1) / opsPerFile;
    std::vector<std::vector<const FunctionText*>> groups(files);
    size_t before = 0; // the ops of the functions before f
    for (const FunctionText& f : fns) {
      groups[std::min(files - 1, before * files / ops)].push_back(&f);
      before += f.ops;
    }
    groups.erase(
        std::remove_if(groups.begin(), groups.end(), [](const auto& p) { return p.empty(); }),
        groups.end());
    std::string declarations = "// The functions of the step files.\n";
    for (const FunctionText& f : fns)
      declarations += "bool " + f.name + "(const StepBuffers& b, std::string* failed);\n";
    out.push_back(
        {"trainer" + ext, parts.about + "//\n// In " + std::to_string(groups.size() + 1) +
                              " files that build in parallel: this one (the model "
                              "description and main),\n// trainer.h (what they share) and " +
                              "trainer_1" + ext + " .. trainer_" + std::to_string(groups.size()) +
                              ext + " (the functions in order).\n#include \"trainer.h\"\n\n" +
                              parts.blobs + "using namespace lwcc_trainer;\n\n" + parts.main});
    out.push_back({"trainer.h", "// What the files of the trainer for " + modelName +
                                    " share, generated by lwcc. Do not edit.\n#pragma once\n" +
                                    parts.includes + "namespace lwcc_trainer {\n\n" + parts.shared +
                                    declarations + "\n} // namespace lwcc_trainer\n"});
    for (size_t k = 0; k < groups.size(); ++k) {
      std::string text =
          "// Part " + std::to_string(k + 1) + " of " + std::to_string(groups.size()) +
          " of the step functions of the trainer for " + modelName +
          ", generated by lwcc.\n#include \"trainer.h\"\n\n" + "namespace lwcc_trainer {\n\n";
      for (const FunctionText* f : groups[k])
        text += f->text;
      out.push_back(
          {"trainer_" + std::to_string(k + 1) + ext, text + "} // namespace lwcc_trainer\n"});
    }
  }
  // The plan's hash: of the whole source (every op, placement and offset),
  // the mark standing for itself.
  uint64_t planHash = 0xcbf29ce484222325ull;
  for (const SourceFile& f : out)
    for (unsigned char c : f.text)
      planHash = (planHash ^ c) * 0x100000001b3ull;
  std::string& mainFile = out[0].text;
  mainFile.replace(mainFile.find(kPlanHashMark), std::strlen(kPlanHashMark),
                   std::to_string(planHash) + "ull");
  return out;
}

llvm::Expected<std::string> packWeights(const std::vector<const Value*>& params,
                                        const WeightMap& weights) {
  std::string out;
  for (const Value* p : params) {
    if (p->zeroInit())
      continue;
    auto it = weights.find(p->paramName());
    if (it == weights.end())
      return makeError(p->loc(), "codegen: no initial value for param '%" + p->name() + "'");
    const Tensor& t = it->second;
    size_t at = out.size();
    out.resize(at + static_cast<size_t>(p->wholeType().sizeInBytes()));
    char* dst = out.data() + at;
    for (int64_t k = 0; k < t.size(); ++k) {
      switch (t.type.dtype) {
      case DType::F32: {
        float v = static_cast<float>(t.f[k]);
        std::memcpy(dst + 4 * k, &v, 4);
        break;
      }
      case DType::F64:
        std::memcpy(dst + 8 * k, &t.f[k], 8);
        break;
      case DType::I64:
        std::memcpy(dst + 8 * k, &t.i[k], 8);
        break;
      case DType::I32: {
        int32_t v = static_cast<int32_t>(t.i[k]);
        std::memcpy(dst + 4 * k, &v, 4);
        break;
      }
      case DType::Bool:
        dst[k] = t.i[k] != 0;
        break;
      default:
        return makeError(p->loc(), "codegen: param '%" + p->name() + "' is " + t.type.str() +
                                       ", which the trainer does not hold");
      }
    }
  }
  return out;
}

} // namespace lwcc::codegen
