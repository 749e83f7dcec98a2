//===- lwcc.cpp - The lwcc driver -----------------------------------------===//
//
//   lwcc MODEL.onnx --emit=ir [-o OUT.lwir] [--batch=N]
//   lwcc MODEL.onnx --run-reference --inputs DIR --outputs OUTDIR [--precision=f64]
//   lwcc --list-onnx-ops
//
// MODEL may be a binary ONNX file or ONNX text (.onnxtext). Exit status: 0
// on success, 1 for a bad model or failed run, 2 for bad usage.
//
//===----------------------------------------------------------------------===//
#include <filesystem>

#include "frontend/Frontend.h"
#include "ir/Interpreter.h"
#include "ir/Printer.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace lwcc;
namespace cl = llvm::cl;
namespace fs = std::filesystem;

namespace {

cl::OptionCategory category("lwcc options");

cl::opt<std::string> modelFile(cl::Positional, cl::desc("<model.onnx | model.onnxtext>"),
                               cl::cat(category));
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"), cl::cat(category));
enum class Emit { IR };
cl::opt<Emit> emit("emit", cl::desc("What to produce"),
                   cl::values(clEnumValN(Emit::IR, "ir", "the model IR (.lwir)")),
                   cl::init(Emit::IR), cl::cat(category));
cl::opt<int64_t> batch("batch", cl::desc("Value of a symbolic leading (batch) dim of the inputs"),
                       cl::init(0), cl::cat(category));
cl::opt<bool> runReference("run-reference",
                           cl::desc("Run the model on the reference interpreter"),
                           cl::cat(category));
cl::opt<std::string> inputsDir("inputs",
                               cl::desc("Folder with input_0.pb, input_1.pb, ... (TensorProto)"),
                               cl::value_desc("dir"), cl::cat(category));
cl::opt<std::string> outputsDir("outputs", cl::desc("Folder to write output_0.pb, ... into"),
                                cl::value_desc("dir"), cl::cat(category));
cl::opt<Precision> precision("precision", cl::desc("Float precision of the interpreter"),
                             cl::values(clEnumValN(Precision::F32, "f32", "float (default)"),
                                        clEnumValN(Precision::F64, "f64", "double")),
                             cl::init(Precision::F32), cl::cat(category));
cl::opt<bool> listOnnxOps("list-onnx-ops", cl::desc("List the ONNX op types lwcc imports"),
                          cl::cat(category));

int fail(llvm::Error e) {
  printErrors(llvm::errs(), std::move(e));
  return 1;
}

int runReferenceMode(const Module& m) {
  if (inputsDir.empty() || outputsDir.empty()) {
    llvm::errs() << "lwcc: --run-reference needs --inputs DIR and --outputs DIR\n";
    return 2;
  }
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < m.graph->inputs().size(); ++k) {
    std::string path = (fs::path(inputsDir.getValue()) / ("input_" + std::to_string(k) + ".pb"));
    auto t = readTensorFile(path);
    if (!t)
      return fail(t.takeError());
    inputs.push_back(std::move(*t));
  }
  auto outputs = interpret(*m.graph, inputs, m.weights, precision);
  if (!outputs)
    return fail(outputs.takeError());
  std::error_code ec;
  fs::create_directories(outputsDir.getValue(), ec);
  if (ec) {
    llvm::errs() << outputsDir << ": error: cannot create: " << ec.message() << "\n";
    return 1;
  }
  for (size_t k = 0; k < outputs->size(); ++k) {
    std::string path = fs::path(outputsDir.getValue()) / ("output_" + std::to_string(k) + ".pb");
    if (llvm::Error e = writeTensorFile((*outputs)[k], m.graph->outputs()[k]->name(), path))
      return fail(std::move(e));
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  cl::HideUnrelatedOptions(category);
  if (!cl::ParseCommandLineOptions(argc, argv, "lwcc: ONNX to training programs\n", &llvm::errs()))
    return 2;
  if (listOnnxOps) {
    for (const std::string& op : supportedOnnxOps())
      llvm::outs() << op << "\n";
    return 0;
  }
  if (modelFile.empty()) {
    llvm::errs() << "lwcc: no model given (lwcc MODEL.onnx ...); see --help\n";
    return 2;
  }
  if (batch.getNumOccurrences() && batch <= 0) {
    llvm::errs() << "lwcc: --batch must be a positive integer\n";
    return 2;
  }
  ImportOptions opts;
  if (batch > 0)
    opts.batch = batch;
  auto module = importFile(modelFile, opts);
  if (!module)
    return fail(module.takeError());

  if (runReference)
    return runReferenceMode(*module);

  std::error_code ec;
  llvm::ToolOutputFile out(outputFile, ec, llvm::sys::fs::OF_Text);
  if (ec) {
    llvm::errs() << outputFile << ": error: cannot write: " << ec.message() << "\n";
    return 1;
  }
  switch (emit) {
  case Emit::IR:
    printGraph(*module->graph, out.os());
    break;
  }
  out.keep();
  return 0;
}
