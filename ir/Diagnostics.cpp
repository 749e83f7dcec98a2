//===- Diagnostics.cpp ----------------------------------------------------===//
#include "ir/Diagnostics.h"

#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace lwcc {

char LocatedError::ID = 0;

std::string Location::str() const {
  if (hasFilePos())
    return file + ":" + std::to_string(line) + ":" + std::to_string(col);
  if (!file.empty())
    return file;
  if (!name.empty())
    return "loc(\"" + name + "\")";
  return "<unknown>";
}

void LocatedError::log(llvm::raw_ostream& os) const { os << loc_.str() << ": " << message_; }

std::error_code LocatedError::convertToErrorCode() const { return llvm::inconvertibleErrorCode(); }

llvm::Error makeError(const Location& loc, std::string message) {
  return llvm::make_error<LocatedError>(loc, std::move(message));
}

llvm::Error makeError(std::string message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

static llvm::SourceMgr::DiagKind toKind(Severity sev) {
  switch (sev) {
  case Severity::Error:
    return llvm::SourceMgr::DK_Error;
  case Severity::Warning:
    return llvm::SourceMgr::DK_Warning;
  case Severity::Note:
    return llvm::SourceMgr::DK_Note;
  }
  return llvm::SourceMgr::DK_Error;
}

void printDiagnostic(llvm::raw_ostream& os, Severity sev, const Location& loc,
                     const std::string& message, llvm::SourceMgr* sm) {
  if (sm && loc.hasFilePos()) {
    for (unsigned id = 1; id <= sm->getNumBuffers(); ++id) {
      if (sm->getMemoryBuffer(id)->getBufferIdentifier() != loc.file)
        continue;
      llvm::SMLoc at = sm->FindLocForLineAndColumn(id, loc.line, loc.col);
      if (at.isValid()) {
        sm->PrintMessage(os, at, toKind(sev), message);
        return;
      }
    }
  }
  const char* word = sev == Severity::Error     ? "error"
                     : sev == Severity::Warning ? "warning"
                                                : "note";
  if (!loc.empty())
    os << loc.str() << ": ";
  os << word << ": " << message << "\n";
}

unsigned printErrors(llvm::raw_ostream& os, llvm::Error err, llvm::SourceMgr* sm) {
  unsigned count = 0;
  llvm::handleAllErrors(
      std::move(err),
      [&](const LocatedError& e) {
        printDiagnostic(os, Severity::Error, e.loc(), e.text(), sm);
        ++count;
      },
      [&](const llvm::ErrorInfoBase& e) {
        os << "error: " << e.message() << "\n";
        ++count;
      });
  return count;
}

} // namespace lwcc
