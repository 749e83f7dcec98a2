//===- Parser.cpp - Lexer and recursive-descent parser for .lwir ----------===//
#include "ir/Parser.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

#include <cmath>
#include <cstdlib>
#include <unordered_map>

namespace lwcc {

namespace {

bool isNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '$' ||
         c == '/' || c == '-';
}

enum class Tok {
  Eof,
  Ident,   // graph, conv2d, f32, strides, inf, ...
  ValueId, // %name
  AtId,    // @name
  Int,
  Float,
  String,
  LParen,
  RParen,
  LBrace,
  RBrace,
  LSquare,
  RSquare,
  Comma,
  Equal,
  Colon,
};

struct Token {
  Tok kind = Tok::Eof;
  std::string text; // identifier or name without sigil, unescaped string, number
  const char* pos = nullptr;
};

class Lexer {
public:
  Lexer(const char* begin, const char* end) : cur_(begin), end_(end) {}

  /// Lexes the next token; on a malformed token sets `error` and its position.
  Token next(std::string& error) {
    skipSpaceAndComments();
    Token t;
    t.pos = cur_;
    if (cur_ == end_)
      return t;
    char c = *cur_;
    auto single = [&](Tok k) {
      ++cur_;
      t.kind = k;
      return t;
    };
    switch (c) {
    case '(':
      return single(Tok::LParen);
    case ')':
      return single(Tok::RParen);
    case '{':
      return single(Tok::LBrace);
    case '}':
      return single(Tok::RBrace);
    case '[':
      return single(Tok::LSquare);
    case ']':
      return single(Tok::RSquare);
    case ',':
      return single(Tok::Comma);
    case '=':
      return single(Tok::Equal);
    case ':':
      return single(Tok::Colon);
    case '"':
      t.kind = Tok::String;
      if (!lexString(t.text, error))
        t.kind = Tok::Eof;
      return t;
    case '%':
    case '@': {
      ++cur_;
      t.kind = c == '%' ? Tok::ValueId : Tok::AtId;
      if (cur_ != end_ && *cur_ == '"') {
        if (!lexString(t.text, error))
          t.kind = Tok::Eof;
        else if (t.text.empty())
          error = "empty name";
        return t;
      }
      const char* start = cur_;
      while (cur_ != end_ && isNameChar(*cur_))
        ++cur_;
      if (cur_ == start)
        error = std::string("expected a name after '") + c + "'";
      t.text.assign(start, cur_);
      return t;
    }
    default:
      break;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+')
      return lexNumber(t, error);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const char* start = cur_;
      while (cur_ != end_ &&
             (std::isalnum(static_cast<unsigned char>(*cur_)) || *cur_ == '_' || *cur_ == '.'))
        ++cur_;
      t.kind = Tok::Ident;
      t.text.assign(start, cur_);
      return t;
    }
    error =
        std::string("unexpected character '") + (std::isprint(c) ? std::string(1, c) : "?") + "'";
    return t;
  }

private:
  void skipSpaceAndComments() {
    while (cur_ != end_) {
      if (std::isspace(static_cast<unsigned char>(*cur_))) {
        ++cur_;
      } else if (*cur_ == '/' && cur_ + 1 != end_ && cur_[1] == '/') {
        while (cur_ != end_ && *cur_ != '\n')
          ++cur_;
      } else {
        break;
      }
    }
  }

  bool lexString(std::string& out, std::string& error) {
    ++cur_; // opening quote
    while (cur_ != end_ && *cur_ != '"') {
      char c = *cur_++;
      if (c == '\n') {
        error = "newline in string";
        return false;
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (cur_ == end_)
        break;
      char e = *cur_++;
      if (e == 'n')
        out += '\n';
      else if (e == 't')
        out += '\t';
      else if (e == '"' || e == '\\')
        out += e;
      else if (std::isxdigit(static_cast<unsigned char>(e)) && cur_ != end_ &&
               std::isxdigit(static_cast<unsigned char>(*cur_))) {
        out += static_cast<char>(std::stoi(std::string{e, *cur_}, nullptr, 16));
        ++cur_;
      } else {
        error = std::string("unknown escape '\\") + e + "' in string";
        return false;
      }
    }
    if (cur_ == end_) {
      error = "unterminated string";
      return false;
    }
    ++cur_; // closing quote
    return true;
  }

  Token lexNumber(Token& t, std::string& error) {
    const char* start = cur_;
    if (*cur_ == '-' || *cur_ == '+')
      ++cur_;
    // -inf / +inf
    if (cur_ + 3 <= end_ && std::string_view(cur_, 3) == "inf" &&
        (cur_ + 3 == end_ || !std::isalnum(static_cast<unsigned char>(cur_[3])))) {
      cur_ += 3;
      t.kind = Tok::Float;
      t.text.assign(start, cur_);
      return t;
    }
    bool isFloat = false;
    const char* digits = cur_;
    while (cur_ != end_ && std::isdigit(static_cast<unsigned char>(*cur_)))
      ++cur_;
    if (cur_ == digits) {
      error = "expected a number";
      return t;
    }
    if (cur_ != end_ && *cur_ == '.') {
      isFloat = true;
      ++cur_;
      while (cur_ != end_ && std::isdigit(static_cast<unsigned char>(*cur_)))
        ++cur_;
    }
    if (cur_ != end_ && (*cur_ == 'e' || *cur_ == 'E')) {
      const char* save = cur_;
      ++cur_;
      if (cur_ != end_ && (*cur_ == '-' || *cur_ == '+'))
        ++cur_;
      if (cur_ != end_ && std::isdigit(static_cast<unsigned char>(*cur_))) {
        isFloat = true;
        while (cur_ != end_ && std::isdigit(static_cast<unsigned char>(*cur_)))
          ++cur_;
      } else {
        cur_ = save;
      }
    }
    t.kind = isFloat ? Tok::Float : Tok::Int;
    t.text.assign(start, cur_);
    return t;
  }

  const char* cur_;
  const char* end_;
};

class Parser {
public:
  Parser(llvm::SourceMgr& sm, unsigned bufferId)
      : sm_(sm), bufferId_(bufferId), lexer_(sm.getMemoryBuffer(bufferId)->getBufferStart(),
                                             sm.getMemoryBuffer(bufferId)->getBufferEnd()),
        file_(sm.getMemoryBuffer(bufferId)->getBufferIdentifier().str()) {}

  llvm::Expected<std::unique_ptr<Graph>> parse();

private:
  // Token handling.
  llvm::Error advance() {
    std::string error;
    tok_ = lexer_.next(error);
    if (!error.empty())
      return errorAt(tok_.pos, error);
    return llvm::Error::success();
  }
  Location locOf(const char* pos) const {
    auto [line, col] = sm_.getLineAndColumn(llvm::SMLoc::getFromPointer(pos), bufferId_);
    return Location{file_, line, col, ""};
  }
  llvm::Error errorAt(const char* pos, const std::string& msg) const {
    return makeError(locOf(pos), msg);
  }
  llvm::Error errorHere(const std::string& msg) const { return errorAt(tok_.pos, msg); }
  std::string describe(const Token& t) const {
    switch (t.kind) {
    case Tok::Eof:
      return "end of file";
    case Tok::Ident:
      return "'" + t.text + "'";
    case Tok::ValueId:
      return "'%" + t.text + "'";
    case Tok::AtId:
      return "'@" + t.text + "'";
    case Tok::String:
      return "a string";
    default:
      return "'" + std::string(t.pos, t.pos + std::max<size_t>(1, t.text.size())) + "'";
    }
  }
  llvm::Error expect(Tok kind, const char* what) {
    if (tok_.kind != kind)
      return errorHere(std::string("expected ") + what + ", got " + describe(tok_));
    return advance();
  }
  bool isIdent(std::string_view word) const { return tok_.kind == Tok::Ident && tok_.text == word; }

  // Grammar.
  llvm::Expected<TensorType> parseType();
  llvm::Expected<int64_t> parseInt();
  llvm::Expected<std::vector<int64_t>> parseIntList();
  llvm::Expected<Attribute> parseAttrValue(const AttrSpec* spec);
  llvm::Error parseInput();
  llvm::Error parseParam(const Token& name);
  /// `start` is the statement's first token (the first result, or the
  /// mnemonic of an op without results).
  llvm::Error parseOp(std::vector<Token> results, const char* start);
  llvm::Error parseAnnotation(Annotations& ann);
  llvm::Error parseReturn();

  llvm::Error define(const Token& name, Value* v) {
    if (!values_.emplace(name.text, v).second)
      return errorAt(name.pos, "redefinition of '%" + name.text + "'");
    v->setName(name.text);
    return llvm::Error::success();
  }
  llvm::Expected<Value*> lookup(const Token& name) const {
    auto it = values_.find(name.text);
    if (it == values_.end())
      return errorAt(name.pos, "use of undefined value '%" + name.text + "'");
    return it->second;
  }

  llvm::SourceMgr& sm_;
  unsigned bufferId_;
  Lexer lexer_;
  std::string file_;
  Token tok_;
  std::unique_ptr<Graph> graph_;
  std::unordered_map<std::string, Value*> values_;
};

#define TRY(expr)                                                                                  \
  if (llvm::Error e = (expr))                                                                      \
  return e

llvm::Expected<int64_t> Parser::parseInt() {
  if (tok_.kind != Tok::Int)
    return errorHere("expected an integer, got " + describe(tok_));
  int64_t v;
  llvm::StringRef digits(tok_.text);
  digits.consume_front("+"); // getAsInteger takes '-' but not '+'
  if (digits.getAsInteger(10, v))
    return errorHere("integer '" + tok_.text + "' is out of range");
  TRY(advance());
  return v;
}

llvm::Expected<std::vector<int64_t>> Parser::parseIntList() {
  TRY(expect(Tok::LSquare, "'['"));
  std::vector<int64_t> out;
  while (tok_.kind != Tok::RSquare) {
    if (!out.empty())
      TRY(expect(Tok::Comma, "',' or ']'"));
    auto v = parseInt();
    if (!v)
      return v.takeError();
    out.push_back(*v);
  }
  TRY(advance());
  return out;
}

llvm::Expected<TensorType> Parser::parseType() {
  if (tok_.kind != Tok::Ident)
    return errorHere("expected a tensor type such as f32[2,3], got " + describe(tok_));
  std::optional<DType> dt = parseDType(tok_.text);
  if (!dt)
    return errorHere("unknown element type '" + tok_.text +
                     "' (expected f32, f64, f16, bf16, i64, i32 or bool)");
  TRY(advance());
  const char* shapePos = tok_.pos;
  auto dims = parseIntList();
  if (!dims)
    return dims.takeError();
  // Keep element counts far from overflow so that no size computation wraps.
  // Zero dims are left out of the product: partial products (strides, the
  // outer size of a flatten) must not wrap either.
  constexpr int64_t kMaxElements = int64_t{1} << 48;
  int64_t n = 1;
  for (int64_t d : *dims) {
    if (d < 0)
      return errorAt(shapePos, "negative dimension " + std::to_string(d) + " in shape");
    if (d == 0)
      continue;
    if (n > kMaxElements / d)
      return errorAt(shapePos, "shape " + shapeStr(*dims) + " has too many elements");
    n *= d;
  }
  return TensorType(*dt, *dims);
}

llvm::Expected<Attribute> Parser::parseAttrValue(const AttrSpec* spec) {
  auto number = [&](bool wantFloat) -> llvm::Expected<std::variant<int64_t, double>> {
    if (tok_.kind == Tok::Int && !wantFloat) {
      auto v = parseInt();
      if (!v)
        return v.takeError();
      return *v;
    }
    if (tok_.kind == Tok::Int || tok_.kind == Tok::Float ||
        (tok_.kind == Tok::Ident && (tok_.text == "inf" || tok_.text == "nan"))) {
      double d = tok_.text == "nan"    ? std::nan("")
                 : tok_.text == "inf"  ? INFINITY
                 : tok_.text == "+inf" ? INFINITY
                 : tok_.text == "-inf" ? -INFINITY
                                       : std::strtod(tok_.text.c_str(), nullptr);
      TRY(advance());
      return d;
    }
    return errorHere("expected a number, got " + describe(tok_));
  };
  bool wantFloat = spec && (spec->kind == AttrKind::Float || spec->kind == AttrKind::Floats);
  if (tok_.kind == Tok::String) {
    std::string s = tok_.text;
    TRY(advance());
    return Attribute(std::move(s));
  }
  if (tok_.kind == Tok::LSquare) {
    TRY(advance());
    std::vector<int64_t> ints;
    std::vector<double> floats;
    bool anyFloat = wantFloat;
    bool first = true;
    while (tok_.kind != Tok::RSquare) {
      if (!first)
        TRY(expect(Tok::Comma, "',' or ']'"));
      first = false;
      bool isFloatTok = tok_.kind != Tok::Int;
      auto v = number(anyFloat || isFloatTok);
      if (!v)
        return v.takeError();
      if (std::holds_alternative<double>(*v) && !anyFloat) {
        anyFloat = true;
        floats.assign(ints.begin(), ints.end());
      }
      if (anyFloat)
        floats.push_back(std::holds_alternative<double>(*v) ? std::get<double>(*v)
                                                            : double(std::get<int64_t>(*v)));
      else
        ints.push_back(std::get<int64_t>(*v));
    }
    TRY(advance());
    if (anyFloat)
      return Attribute(std::move(floats));
    return Attribute(std::move(ints));
  }
  auto v = number(wantFloat || tok_.kind != Tok::Int);
  if (!v)
    return v.takeError();
  if (std::holds_alternative<double>(*v))
    return Attribute(std::get<double>(*v));
  return Attribute(std::get<int64_t>(*v));
}

llvm::Error Parser::parseInput() {
  if (tok_.kind != Tok::ValueId)
    return errorHere("expected an input such as %x: f32[1,3,8,8] @data, got " + describe(tok_));
  Token name = tok_;
  TRY(advance());
  TRY(expect(Tok::Colon, "':' after the input name"));
  auto type = parseType();
  if (!type)
    return type.takeError();
  if (tok_.kind != Tok::AtId || (tok_.text != "data" && tok_.text != "label"))
    return errorHere("expected the input role @data or @label, got " + describe(tok_));
  InputRole role = tok_.text == "label" ? InputRole::Label : InputRole::Data;
  TRY(advance());
  Value* v = graph_->addInput("", *type, role);
  v->setLoc(locOf(name.pos));
  return define(name, v);
}

llvm::Error Parser::parseParam(const Token& name) {
  // 'param' already consumed.
  if (tok_.kind != Tok::String)
    return errorHere("expected the initializer name of the param as a string, got " +
                     describe(tok_));
  std::string init = tok_.text;
  TRY(advance());
  bool zeros = isIdent("zeros");
  if (zeros)
    TRY(advance());
  bool frozen = isIdent("frozen");
  if (frozen)
    TRY(advance());
  // shard(dim: offset of whole, ...): where this shard lies in its initializer.
  std::vector<ShardDim> shard;
  if (isIdent("shard")) {
    TRY(advance());
    TRY(expect(Tok::LParen, "'(' after shard"));
    while (tok_.kind != Tok::RParen) {
      if (!shard.empty())
        TRY(expect(Tok::Comma, "',' or ')'"));
      const char* at = tok_.pos;
      auto dim = parseInt();
      if (!dim)
        return dim.takeError();
      TRY(expect(Tok::Colon, "':' between the shard's dim and offset"));
      auto off = parseInt();
      if (!off)
        return off.takeError();
      if (!isIdent("of"))
        return errorHere("expected 'of' and the whole tensor's size, got " + describe(tok_));
      TRY(advance());
      auto whole = parseInt();
      if (!whole)
        return whole.takeError();
      if (*dim < 0 || *off < 0 || (!shard.empty() && *dim <= shard.back().dim))
        return errorAt(at, "shard dims must be >= 0 and increasing, offsets >= 0");
      shard.push_back({*dim, *off, *whole});
    }
    if (shard.empty())
      return errorHere("a shard names at least one dim");
    TRY(advance());
  }
  TRY(expect(Tok::Colon, "':' before the param type"));
  auto type = parseType();
  if (!type)
    return type.takeError();
  if (!graph_->ops().empty())
    return errorAt(name.pos, "params must be declared before the first op");
  for (const ShardDim& sd : shard) {
    if (sd.dim >= type->rank())
      return errorAt(name.pos, "the shard names dim " + std::to_string(sd.dim) + " of a rank-" +
                                   std::to_string(type->rank()) + " param");
    if (sd.offset + type->shape[sd.dim] > sd.whole)
      return errorAt(name.pos, "the shard of dim " + std::to_string(sd.dim) + " ends at " +
                                   std::to_string(sd.offset + type->shape[sd.dim]) +
                                   ", past the whole size " + std::to_string(sd.whole));
  }
  std::optional<int64_t> device;
  if (tok_.kind == Tok::AtId && tok_.text == "dev") {
    Annotations ann;
    TRY(parseAnnotation(ann));
    device = ann.device;
  }
  Value* v = graph_->addParam("", init, *type);
  v->setLoc(locOf(name.pos));
  v->setZeroInit(zeros);
  v->setFrozen(frozen);
  v->setShard(std::move(shard));
  v->setDevice(device);
  return define(name, v);
}

llvm::Error Parser::parseAnnotation(Annotations& ann) {
  Token at = tok_;
  std::string key = tok_.text;
  TRY(advance());
  TRY(expect(Tok::LParen, "'(' after the annotation"));
  auto once = [&](bool alreadySet) -> llvm::Error {
    if (alreadySet)
      return errorAt(at.pos, "annotation '@" + key + "' is given twice");
    return llvm::Error::success();
  };
  if (key == "par") {
    TRY(once(ann.par.has_value()));
    ParallelConfig pc;
    bool first = true;
    while (tok_.kind != Tok::RParen) {
      if (!first)
        TRY(expect(Tok::Comma, "',' or ')'"));
      first = false;
      if (tok_.kind != Tok::Ident)
        return errorHere("expected a dim name (n, c, h, w, d0, ...), 'devices' or 'sizes', got " +
                         describe(tok_));
      std::string dim = tok_.text;
      TRY(advance());
      TRY(expect(Tok::Equal, "'='"));
      if (dim == "devices") {
        auto devs = parseIntList();
        if (!devs)
          return devs.takeError();
        pc.devices = *devs;
      } else if (dim == "sizes") {
        auto sizes = parseIntList();
        if (!sizes)
          return sizes.takeError();
        pc.sizes = *sizes;
      } else {
        auto d = parseInt();
        if (!d)
          return d.takeError();
        pc.degrees.emplace_back(dim, *d);
      }
    }
    ann.par = std::move(pc);
  } else if (key == "buf") {
    TRY(once(ann.bufferOffsets.has_value()));
    std::vector<int64_t> offs;
    while (tok_.kind != Tok::RParen) {
      if (!offs.empty())
        TRY(expect(Tok::Comma, "',' or ')'"));
      auto v = parseInt();
      if (!v)
        return v.takeError();
      offs.push_back(*v);
    }
    ann.bufferOffsets = std::move(offs);
  } else {
    std::optional<int64_t>* slot = key == "dev"      ? &ann.device
                                   : key == "stream" ? &ann.stream
                                   : key == "mb"     ? &ann.microBatch
                                                     : nullptr;
    if (!slot)
      return errorAt(at.pos, "unknown annotation '@" + key +
                                 "' (expected @par, @dev, @stream, @mb or @buf)");
    TRY(once(slot->has_value()));
    auto v = parseInt();
    if (!v)
      return v.takeError();
    *slot = *v;
  }
  return expect(Tok::RParen, "')' to close the annotation");
}

llvm::Error Parser::parseOp(std::vector<Token> results, const char* start) {
  // Results and '=' already consumed; the mnemonic is current.
  if (tok_.kind != Tok::Ident)
    return errorHere("expected an op name, got " + describe(tok_));
  Token mnemonicTok = tok_;
  std::optional<OpKind> kind = lookupOpKind(tok_.text);
  if (!kind)
    return errorHere("unknown op '" + tok_.text + "'");
  const OpInfo& info = opInfo(*kind);
  TRY(advance());
  TRY(expect(Tok::LParen, "'(' before the operands"));
  std::vector<Value*> operands;
  while (tok_.kind != Tok::RParen) {
    if (!operands.empty())
      TRY(expect(Tok::Comma, "',' or ')'"));
    if (tok_.kind != Tok::ValueId)
      return errorHere("expected an operand such as %x, got " + describe(tok_));
    auto v = lookup(tok_);
    if (!v)
      return v.takeError();
    operands.push_back(*v);
    TRY(advance());
  }
  TRY(advance());
  std::vector<NamedAttr> attrs;
  if (tok_.kind == Tok::LBrace) {
    TRY(advance());
    while (tok_.kind != Tok::RBrace) {
      if (!attrs.empty())
        TRY(expect(Tok::Comma, "',' or '}'"));
      if (tok_.kind != Tok::Ident)
        return errorHere("expected an attribute name, got " + describe(tok_));
      std::string name = tok_.text;
      // Op::setAttr would silently keep only the last value.
      for (const NamedAttr& a : attrs)
        if (a.name == name)
          return errorHere("attribute '" + name + "' is given twice");
      TRY(advance());
      TRY(expect(Tok::Equal, "'=' after the attribute name"));
      auto value = parseAttrValue(info.findAttr(name));
      if (!value)
        return value.takeError();
      attrs.push_back(NamedAttr{name, std::move(*value)});
    }
    TRY(advance());
  }
  std::vector<TensorType> types;
  if (!results.empty()) {
    TRY(expect(Tok::Colon, "':' before the result types"));
    do {
      if (!types.empty())
        TRY(advance()); // the comma
      auto t = parseType();
      if (!t)
        return t.takeError();
      types.push_back(*t);
    } while (tok_.kind == Tok::Comma);
  } else if (tok_.kind == Tok::Colon) {
    return errorHere("an op without results has no result types");
  }
  if (types.size() != results.size())
    return errorAt(mnemonicTok.pos, "'" + mnemonicTok.text + "' has " +
                                        std::to_string(results.size()) + " results but " +
                                        std::to_string(types.size()) + " result types");
  Annotations ann;
  while (tok_.kind == Tok::AtId)
    TRY(parseAnnotation(ann));
  Location loc = locOf(start);
  if (isIdent("loc")) {
    TRY(advance());
    TRY(expect(Tok::LParen, "'(' after loc"));
    if (tok_.kind != Tok::String)
      return errorHere("expected a string in loc(...), got " + describe(tok_));
    loc.name = tok_.text;
    TRY(advance());
    TRY(expect(Tok::RParen, "')' to close loc"));
  }
  Op* op = graph_->createOp(*kind, operands, types, loc);
  for (NamedAttr& a : attrs)
    op->setAttr(a.name, std::move(a.value)); // names are unique: checked above
  op->annotations() = std::move(ann);
  for (unsigned i = 0; i < results.size(); ++i) {
    op->result(i)->setLoc(locOf(results[i].pos));
    TRY(define(results[i], op->result(i)));
  }
  return llvm::Error::success();
}

llvm::Error Parser::parseReturn() {
  // 'return' already consumed.
  bool first = true;
  while (tok_.kind == Tok::ValueId || (!first && tok_.kind == Tok::Comma)) {
    if (!first)
      TRY(expect(Tok::Comma, "','"));
    first = false;
    if (tok_.kind != Tok::ValueId)
      return errorHere("expected a value after ',', got " + describe(tok_));
    auto v = lookup(tok_);
    if (!v)
      return v.takeError();
    TRY(advance());
    Value* gradOf = nullptr;
    if (tok_.kind == Tok::AtId) {
      if (tok_.text != "grad")
        return errorHere("unknown output annotation '@" + tok_.text + "' (expected @grad)");
      TRY(advance());
      TRY(expect(Tok::LParen, "'(' after @grad"));
      if (tok_.kind != Tok::ValueId)
        return errorHere("expected the param of @grad, got " + describe(tok_));
      auto p = lookup(tok_);
      if (!p)
        return p.takeError();
      if ((*p)->kind() != ValueKind::Param)
        return errorHere("@grad names '%" + tok_.text + "', which is not a param");
      gradOf = *p;
      TRY(advance());
      TRY(expect(Tok::RParen, "')' to close @grad"));
    }
    graph_->addOutput(*v, gradOf);
  }
  return expect(Tok::RBrace, "'}' after the return statement");
}

llvm::Expected<std::unique_ptr<Graph>> Parser::parse() {
  TRY(advance());
  if (!isIdent("graph"))
    return errorHere("expected 'graph', got " + describe(tok_));
  TRY(advance());
  if (tok_.kind != Tok::AtId)
    return errorHere("expected the graph name such as @main, got " + describe(tok_));
  graph_ = std::make_unique<Graph>(tok_.text);
  TRY(advance());
  TRY(expect(Tok::LParen, "'(' before the graph inputs"));
  while (tok_.kind != Tok::RParen) {
    if (!graph_->inputs().empty())
      TRY(expect(Tok::Comma, "',' or ')'"));
    TRY(parseInput());
  }
  TRY(advance());
  TRY(expect(Tok::LBrace, "'{' to open the graph body"));
  while (true) {
    if (isIdent("return")) {
      TRY(advance());
      TRY(parseReturn());
      break;
    }
    if (tok_.kind == Tok::Ident) { // an op without results, e.g. assign(%w, %w2)
      const char* start = tok_.pos;
      TRY(parseOp({}, start));
      continue;
    }
    if (tok_.kind != Tok::ValueId)
      return errorHere("expected a statement ('%name = ...' or 'return'), got " + describe(tok_));
    const char* start = tok_.pos;
    std::vector<Token> results{tok_};
    TRY(advance());
    while (tok_.kind == Tok::Comma) {
      TRY(advance());
      if (tok_.kind != Tok::ValueId)
        return errorHere("expected a result name, got " + describe(tok_));
      results.push_back(tok_);
      TRY(advance());
    }
    TRY(expect(Tok::Equal, "'='"));
    if (isIdent("param")) {
      if (results.size() != 1)
        return errorAt(results[1].pos, "a param defines one value");
      TRY(advance());
      TRY(parseParam(results[0]));
    } else {
      TRY(parseOp(std::move(results), start));
    }
  }
  if (tok_.kind != Tok::Eof)
    return errorHere("expected end of file after the graph, got " + describe(tok_));
  return std::move(graph_);
}

} // namespace

bool isBareName(std::string_view name) {
  if (name.empty())
    return false;
  for (char c : name)
    if (!isNameChar(c))
      return false;
  return true;
}

llvm::Expected<std::unique_ptr<Graph>> parseGraph(llvm::SourceMgr& sm, unsigned bufferId) {
  return Parser(sm, bufferId).parse();
}

llvm::Expected<std::unique_ptr<Graph>> parseGraph(std::string_view text, std::string_view name) {
  llvm::SourceMgr sm;
  unsigned id = sm.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(text.data(), text.size()),
                                           llvm::StringRef(name.data(), name.size())),
      llvm::SMLoc());
  return parseGraph(sm, id);
}

} // namespace lwcc
