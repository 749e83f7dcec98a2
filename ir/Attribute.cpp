//===- Attribute.cpp ------------------------------------------------------===//
#include "ir/Attribute.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace lwcc {

std::string_view attrKindName(AttrKind k) {
  switch (k) {
  case AttrKind::Int:
    return "int";
  case AttrKind::Float:
    return "float";
  case AttrKind::String:
    return "string";
  case AttrKind::Ints:
    return "int list";
  case AttrKind::Floats:
    return "float list";
  }
  return "?";
}

std::string formatFloat(double v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, end);
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

std::string quoteString(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (c < 0x20 || c >= 0x7f) {
        char hex[4];
        std::snprintf(hex, sizeof(hex), "\\%02X", c);
        out += hex;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  out += '"';
  return out;
}

std::string Attribute::str() const {
  switch (kind()) {
  case AttrKind::Int:
    return std::to_string(getInt());
  case AttrKind::Float:
    return formatFloat(getFloat());
  case AttrKind::String:
    return quoteString(getString());
  case AttrKind::Ints: {
    std::string out = "[";
    for (size_t i = 0; i < getInts().size(); ++i)
      out += (i ? ", " : "") + std::to_string(getInts()[i]);
    return out + "]";
  }
  case AttrKind::Floats: {
    std::string out = "[";
    for (size_t i = 0; i < getFloats().size(); ++i)
      out += (i ? ", " : "") + formatFloat(getFloats()[i]);
    return out + "]";
  }
  }
  return "";
}

} // namespace lwcc
