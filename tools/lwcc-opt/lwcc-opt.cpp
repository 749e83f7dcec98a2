//===- lwcc-opt.cpp - Run passes on .lwir files ---------------------------===//
//
//   lwcc-opt FILE.lwir [--PASS ...] [--pipeline=NAME] [-o OUT]
//   lwcc-opt @PIPELINE FILE.lwir   (the passes of `lwcc --print-pipeline`)
//
// Reads a graph (FILE or '-' for stdin), verifies it, runs the passes in the
// order given on the command line, and prints the result. Exit status: 0 on
// success, 1 when the input or a pass fails, 2 for bad usage.
//
//===----------------------------------------------------------------------===//
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "plan/Pipelines.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace lwcc;
namespace cl = llvm::cl;

namespace {

cl::OptionCategory category("lwcc-opt options");

cl::opt<std::string> inputFile(cl::Positional, cl::desc("<input .lwir file, or - for stdin>"),
                               cl::cat(category));
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"), cl::cat(category));
cl::opt<bool> verifyEach("verify-each", cl::desc("Verify the graph after every pass"),
                         cl::cat(category));
cl::opt<bool> printAfterAll("print-ir-after-all",
                            cl::desc("Print the graph to stderr after every pass"),
                            cl::cat(category));
cl::opt<bool> timePasses("pass-times",
                         cl::desc("Print each pass's wall time and op count to stderr"),
                         cl::cat(category));
cl::opt<bool> verifyInput("verify-input",
                          cl::desc("Verify the input before running passes (default on; "
                                   "--verify-input=false lets shape-infer repair stale types)"),
                          cl::init(true), cl::cat(category));
cl::list<std::string> pipelines("pipeline", cl::desc("Run a named pipeline (see --list-passes)"),
                                cl::value_desc("name"), cl::cat(category));
cl::opt<bool> listPasses("list-passes", cl::desc("List passes and pipelines, then exit"),
                         cl::cat(category));

/// One flag per registered pass (--name or --name=options); the
/// command-line positions give the order.
struct PassFlag {
  const PassInfo* info;
  std::unique_ptr<cl::list<std::string>> flag;
};

std::vector<PassFlag> registerPassFlags() {
  std::vector<PassFlag> flags;
  for (const PassInfo& p : allPasses()) {
    auto flag = std::make_unique<cl::list<std::string>>(
        llvm::StringRef(p.name.data(), p.name.size()),
        cl::desc(llvm::StringRef(p.description.data(), p.description.size())), cl::ZeroOrMore,
        p.takesOptions ? cl::ValueOptional : cl::ValueDisallowed, cl::cat(category));
    if (p.takesOptions)
      flag->setValueStr("options");
    flags.push_back(PassFlag{&p, std::move(flag)});
  }
  return flags;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<PassFlag> passFlags = registerPassFlags();
  cl::HideUnrelatedOptions(category);
  if (!cl::ParseCommandLineOptions(argc, argv, "lwcc-opt: run lwcc passes on .lwir graphs\n",
                                   &llvm::errs()))
    return 2;

  if (listPasses) {
    llvm::outs() << "Passes:\n";
    for (const PassInfo& p : allPasses())
      llvm::outs() << "  --" << p.name << "  " << p.description << "\n";
    llvm::outs() << "Pipelines (--pipeline=NAME):\n";
    for (const PipelineInfo& p : allPipelines()) {
      llvm::outs() << "  " << p.name << "  " << p.description << ":";
      for (std::string_view s : p.passes)
        llvm::outs() << " " << s;
      llvm::outs() << "\n";
    }
    return 0;
  }

  if (inputFile.empty()) {
    llvm::errs() << "lwcc-opt: no input file (give a .lwir file, or - for stdin); see --help\n";
    return 2;
  }

  // Order the requested passes and pipelines by command-line position.
  std::vector<std::pair<unsigned, std::string>> steps; // (position, pass or "@pipeline")
  for (const PassFlag& f : passFlags)
    for (unsigned i = 0; i < f.flag->size(); ++i)
      steps.emplace_back(f.flag->getPosition(i),
                         std::string(f.info->name) +
                             ((*f.flag)[i].empty() ? "" : "=" + (*f.flag)[i]));
  for (unsigned i = 0; i < pipelines.size(); ++i)
    steps.emplace_back(pipelines.getPosition(i), "@" + pipelines[i]);
  std::sort(steps.begin(), steps.end());
  PassPipeline pipeline;
  for (const auto& [pos, step] : steps) {
    auto part = step[0] == '@' ? buildPipeline(std::string_view(step).substr(1))
                               : buildPipeline(std::vector<std::string>{step});
    if (!part) {
      llvm::errs() << "lwcc-opt: " << llvm::toString(part.takeError()) << "\n";
      return 2;
    }
    for (auto& p : *part)
      pipeline.push_back(std::move(p));
  }

  llvm::SourceMgr sm;
  auto buffer = llvm::MemoryBuffer::getFileOrSTDIN(inputFile);
  if (!buffer) {
    llvm::errs() << inputFile << ": error: cannot read: " << buffer.getError().message() << "\n";
    return 1;
  }
  unsigned id = sm.AddNewSourceBuffer(std::move(*buffer), llvm::SMLoc());

  auto graph = parseGraph(sm, id);
  if (!graph) {
    printErrors(llvm::errs(), graph.takeError(), &sm);
    return 1;
  }
  if (verifyInput)
    if (llvm::Error e = verifyGraph(**graph)) {
      printErrors(llvm::errs(), std::move(e), &sm);
      return 1;
    }

  PassContext ctx;
  ctx.diag = [&](Severity sev, const Location& loc, const std::string& msg) {
    printDiagnostic(llvm::errs(), sev, loc, msg, &sm);
  };
  PassRunOptions opts;
  opts.verifyEach = verifyEach;
  opts.printAfterAll = printAfterAll ? &llvm::errs() : nullptr;
  opts.timePasses = timePasses ? &llvm::errs() : nullptr;
  if (llvm::Error e = runPipeline(**graph, pipeline, ctx, opts)) {
    printErrors(llvm::errs(), std::move(e), &sm);
    return 1;
  }

  std::error_code ec;
  llvm::ToolOutputFile out(outputFile, ec, llvm::sys::fs::OF_Text);
  if (ec) {
    llvm::errs() << outputFile << ": error: cannot write: " << ec.message() << "\n";
    return 1;
  }
  printGraph(**graph, out.os());
  out.keep();
  return 0;
}
