//===- Diagnostics.h - Locations and located errors ------------*- C++ -*-===//
//
// Every op carries a Location: the ONNX node name it came from, the
// line:col of the .lwir text it was parsed from, or both. Library code
// reports failures as llvm::Error values carrying a Location; only tools turn
// them into messages and exit codes.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "llvm/Support/Error.h"

#include <functional>
#include <string>

namespace llvm {
class SourceMgr;
class raw_ostream;
} // namespace llvm

namespace lwcc {

struct Location {
  std::string file; ///< The file the op was read from, if any.
  unsigned line = 0;
  unsigned col = 0;
  std::string name; ///< The ONNX node name or loc("...") of the text form.

  bool hasFilePos() const { return !file.empty() && line != 0; }
  bool empty() const { return file.empty() && name.empty(); }
  /// "file:line:col", else "file", else loc("name"), else "<unknown>".
  std::string str() const;
};

enum class Severity { Error, Warning, Note };

/// An error at a location. Its message does not repeat the location.
class LocatedError : public llvm::ErrorInfo<LocatedError> {
public:
  static char ID;
  LocatedError(Location loc, std::string message)
      : loc_(std::move(loc)), message_(std::move(message)) {}

  const Location& loc() const { return loc_; }
  const std::string& text() const { return message_; }

  void log(llvm::raw_ostream& os) const override;
  std::error_code convertToErrorCode() const override;

private:
  Location loc_;
  std::string message_;
};

llvm::Error makeError(const Location& loc, std::string message);
/// An error without a location (command line, I/O).
llvm::Error makeError(std::string message);

/// Receives warnings and notes that passes emit while they run.
using DiagHandler = std::function<void(Severity, const Location&, const std::string&)>;

/// Prints one diagnostic as "FILE:LINE:COL: error: message", with the source
/// line and a caret when `sm` holds the file.
void printDiagnostic(llvm::raw_ostream& os, Severity sev, const Location& loc,
                     const std::string& message, llvm::SourceMgr* sm = nullptr);

/// Prints every error inside `err` (consuming it) and returns how many there were.
unsigned printErrors(llvm::raw_ostream& os, llvm::Error err, llvm::SourceMgr* sm = nullptr);

} // namespace lwcc
