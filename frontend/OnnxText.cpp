//===- OnnxText.cpp - ONNX's textual syntax, non-finite literals ----------===//
#include "frontend/OnnxText.h"

#include "ir/Diagnostics.h"
#include "onnx/defs/parser.h"
#include "onnx/onnx_pb.h"

#include "llvm/Support/FormatVariadic.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

namespace lwcc {

namespace {

/// A token of the textual syntax, as far as finding literals needs: the
/// parser itself checks the rest.
struct Token {
  enum Kind { Word, Number, String, Arrow, Punct } kind;
  size_t begin, end;
};

bool isWordStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool isWordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool isDigit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

/// The tokens of `text` as ONNX's parser reads them: `#` comments to the end
/// of the line, strings in double quotes, words (a minus sign before a word
/// kept with it), numbers ([-]digits and dots, an exponent), `=>`, and
/// single characters.
std::vector<Token> lex(llvm::StringRef text) {
  std::vector<Token> tokens;
  size_t i = 0;
  const size_t n = text.size();
  auto emit = [&](Token::Kind kind, size_t begin) { tokens.push_back({kind, begin, i}); };
  while (i < n) {
    const char c = text[i];
    const size_t begin = i;
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == '#') {
      while (i < n && text[i] != '\n')
        ++i;
    } else if (c == '"') {
      size_t quote = text.find('"', i + 1);
      i = quote == llvm::StringRef::npos ? n : quote + 1;
      emit(Token::String, begin);
    } else if (isWordStart(c) || (c == '-' && i + 1 < n && isWordStart(text[i + 1]))) {
      ++i;
      while (i < n && isWordChar(text[i]))
        ++i;
      emit(Token::Word, begin);
    } else if (isDigit(c) || c == '-') {
      ++i;
      while (i < n && (isDigit(text[i]) || text[i] == '.'))
        ++i;
      if (i < n && (text[i] == 'e' || text[i] == 'E')) {
        ++i;
        if (i < n && (text[i] == '+' || text[i] == '-'))
          ++i;
        while (i < n && isDigit(text[i]))
          ++i;
      }
      emit(Token::Number, begin);
    } else if (c == '=' && i + 1 < n && text[i + 1] == '>') {
      i += 2;
      emit(Token::Arrow, begin);
    } else {
      ++i;
      emit(Token::Punct, begin);
    }
  }
  return tokens;
}

/// What a non-finite literal stands for.
enum class NonFinite { PosInf, NegInf, PosNan, NegNan };

/// The non-finite value a word spells (`inf`, `infinity`, `nan`, any case,
/// perhaps minus-signed), if it spells one.
std::optional<NonFinite> nonFiniteWord(llvm::StringRef word) {
  bool negative = word.consume_front("-");
  if (word.equals_insensitive("inf") || word.equals_insensitive("infinity"))
    return negative ? NonFinite::NegInf : NonFinite::PosInf;
  if (word.equals_insensitive("nan"))
    return negative ? NonFinite::NegNan : NonFinite::PosNan;
  return std::nullopt;
}

/// The brackets that decide whether a word is a literal (step 1).
enum class Bracket { Paren, Dims, List, Data, Nodes, Attrs };

/// A non-finite literal of the text: where it stands and what it means.
struct Literal {
  size_t begin, end;
  NonFinite value;
};

/// Step 1: the non-finite literals of `text`, in order.
std::vector<Literal> findLiterals(llvm::StringRef text, const std::vector<Token>& tokens) {
  std::vector<Literal> found;
  std::vector<Bracket> open;
  auto punct = [&](size_t k, char c) {
    return k < tokens.size() && tokens[k].kind == Token::Punct && text[tokens[k].begin] == c;
  };
  auto close = [&](Bracket b) {
    if (!open.empty() && open.back() == b)
      open.pop_back();
  };
  for (size_t k = 0; k < tokens.size(); ++k) {
    const Token& t = tokens[k];
    const bool afterEquals = k > 0 && punct(k - 1, '=');
    if (t.kind == Token::Word) {
      llvm::StringRef word = text.slice(t.begin, t.end);
      std::optional<NonFinite> v = nonFiniteWord(word);
      if (!v)
        continue;
      Bracket in = open.empty() ? Bracket::Nodes : open.back();
      if (word.startswith("-") || in == Bracket::Data || in == Bracket::List ||
          (in == Bracket::Attrs && afterEquals && !punct(k + 1, '(')))
        found.push_back({t.begin, t.end, *v});
      continue;
    }
    if (t.kind != Token::Punct)
      continue;
    switch (text[t.begin]) {
    case '(':
      open.push_back(Bracket::Paren);
      break;
    case ')':
      close(Bracket::Paren);
      break;
    case '[':
      open.push_back(afterEquals ? Bracket::List : Bracket::Dims);
      break;
    case ']':
      if (!open.empty() && (open.back() == Bracket::List || open.back() == Bracket::Dims))
        open.pop_back();
      break;
    case '{':
      // A graph's or function's nodes follow its outputs `)` or its
      // initializers `>`; a tensor's values follow `=`, its type or its dims.
      open.push_back(k > 0 && (punct(k - 1, ')') || punct(k - 1, '>')) ? Bracket::Nodes
                                                                       : Bracket::Data);
      break;
    case '}':
      if (!open.empty() && (open.back() == Bracket::Data || open.back() == Bracket::Nodes))
        open.pop_back();
      break;
    case '<':
      open.push_back(Bracket::Attrs);
      break;
    case '>':
      close(Bracket::Attrs);
      break;
    default:
      break;
    }
  }
  return found;
}

/// Step 2's stand-ins: two float32 values, exact in double, that no number
/// of the text equals (in float32 or in double, either sign).
std::pair<float, float> standIns(llvm::StringRef text, const std::vector<Token>& tokens) {
  std::set<double> taken;
  for (const Token& t : tokens)
    if (t.kind == Token::Number) {
      std::string s = text.slice(t.begin, t.end).str();
      double v = std::strtod(s.c_str(), nullptr);
      taken.insert(std::fabs(v));
      taken.insert(std::fabs(static_cast<double>(static_cast<float>(v))));
    }
  std::vector<float> picked;
  // 2^125 (1 + k 2^-22): 23 significant bits, exact in float32.
  for (int k = 1; picked.size() < 2; ++k) {
    float c = std::ldexp(1.0f + static_cast<float>(k) * std::ldexp(1.0f, -22), 125);
    if (!taken.count(static_cast<double>(c)))
      picked.push_back(c);
  }
  return {picked[0], picked[1]};
}

/// Step 3: the values the stand-ins took back to the literals'.
class Restorer {
public:
  Restorer(float inf, float nan) : inf_(inf), nan_(nan) {}

  void model(onnx::ModelProto& m) const {
    graph(*m.mutable_graph());
    for (onnx::FunctionProto& f : *m.mutable_functions())
      for (onnx::NodeProto& n : *f.mutable_node())
        node(n);
  }

private:
  template <typename T> T value(T v) const {
    const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
    if (v == static_cast<T>(inf_))
      return inf;
    if (v == -static_cast<T>(inf_))
      return -inf;
    if (std::fabs(v) == static_cast<T>(nan_))
      return std::copysign(nan, v);
    return v;
  }
  void tensor(onnx::TensorProto& t) const {
    if (t.data_type() == onnx::TensorProto::FLOAT)
      for (float& v : *t.mutable_float_data())
        v = value(v);
    else if (t.data_type() == onnx::TensorProto::DOUBLE)
      for (double& v : *t.mutable_double_data())
        v = value(v);
  }
  void attribute(onnx::AttributeProto& a) const {
    if (a.has_f())
      a.set_f(value(a.f()));
    for (float& v : *a.mutable_floats())
      v = value(v);
    if (a.has_t())
      tensor(*a.mutable_t());
    for (onnx::TensorProto& t : *a.mutable_tensors())
      tensor(t);
    if (a.has_g())
      graph(*a.mutable_g());
    for (onnx::GraphProto& g : *a.mutable_graphs())
      graph(g);
  }
  void node(onnx::NodeProto& n) const {
    for (onnx::AttributeProto& a : *n.mutable_attribute())
      attribute(a);
  }
  void graph(onnx::GraphProto& g) const {
    for (onnx::TensorProto& t : *g.mutable_initializer())
      tensor(t);
    for (onnx::NodeProto& n : *g.mutable_node())
      node(n);
  }

  float inf_, nan_;
};

/// ONNX's parser, its position readable after an exception.
class TextParser : public onnx::OnnxParser {
public:
  using onnx::OnnxParser::OnnxParser;
  /// The 1-based line and column the parser has reached.
  std::pair<unsigned, unsigned> position() const {
    unsigned line = 1, col = 1;
    for (const char* p = start_; p < next_; ++p) {
      if (*p == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return {line, col};
  }
};

} // namespace

llvm::Error parseOnnxText(llvm::StringRef text, const std::string& file, onnx::ModelProto& model) {
  const std::vector<Token> tokens = lex(text);
  const std::vector<Literal> literals = findLiterals(text, tokens);
  std::string rewritten;
  // Each stand-in's text and a literal it replaced, for messages.
  std::map<std::string, std::string> shown;
  float inf = 0, nan = 0;
  if (!literals.empty()) {
    std::tie(inf, nan) = standIns(text, tokens);
    size_t at = 0;
    for (const Literal& l : literals) {
      bool isInf = l.value == NonFinite::PosInf || l.value == NonFinite::NegInf;
      bool negative = l.value == NonFinite::NegInf || l.value == NonFinite::NegNan;
      std::string standIn =
          llvm::formatv("{0}{1:e16}", negative ? "-" : "", static_cast<double>(isInf ? inf : nan))
              .str();
      rewritten += text.slice(at, l.begin);
      rewritten += standIn;
      shown.emplace(standIn, text.slice(l.begin, l.end).str());
      at = l.end;
    }
    rewritten += text.substr(at);
  } else {
    rewritten = text.str();
  }

  // A message shows the literals as written, not their stand-ins: the
  // negative ones first (a positive one's text ends theirs; "-" sorts first).
  auto asWritten = [&](std::string message) {
    for (const auto& [standIn, literal] : shown)
      for (size_t p = message.find(standIn); p != std::string::npos;
           p = message.find(standIn, p + literal.size()))
        message.replace(p, standIn.size(), literal);
    return message;
  };
  TextParser parser(rewritten.c_str());
  onnx::Common::Status status;
  try {
    status = parser.Parse(model);
  } catch (const std::logic_error& e) {
    // std::stof and std::stoll throw on a number out of their type's range
    // (std::out_of_range) or on no number (std::invalid_argument).
    auto [line, col] = parser.position();
    return makeError(Location{file, line, col, ""},
                     llvm::formatv("cannot parse ONNX text: a number that std::{0} cannot "
                                   "convert (out of its type's range?) in `{1}`",
                                   e.what(), asWritten(parser.GetErrorContext()))
                         .str());
  }
  if (!status.IsOK())
    return makeError(Location{file, 0, 0, ""},
                     "cannot parse ONNX text: " + asWritten(status.ErrorMessage()));
  if (!literals.empty())
    Restorer(inf, nan).model(model);
  return llvm::Error::success();
}

} // namespace lwcc
