#include "flight/json_reader.hpp"

#include <cstdlib>

namespace dtlaunch::flight {
namespace {

constexpr int kMaxDepth = 32;

}  // namespace

bool JsonReader::fail(const std::string& what) {
  if (error_.empty())
    error_ = i_ >= s_.size() ? "truncated at byte " + std::to_string(s_.size())
                             : "byte " + std::to_string(i_) + ": " + what;
  return false;
}

void JsonReader::ws() {
  while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
    ++i_;
}

bool JsonReader::peek(char c) {
  ws();
  return i_ < s_.size() && s_[i_] == c;
}

bool JsonReader::expect(char c) {
  ws();
  if (i_ < s_.size() && s_[i_] == c) {
    ++i_;
    return true;
  }
  return fail(std::string("expected '") + c + "'");
}

bool JsonReader::string(std::string& out) {
  out.clear();
  if (!expect('"')) return false;
  while (i_ < s_.size()) {
    const char c = s_[i_++];
    if (c == '"') return true;
    if (static_cast<unsigned char>(c) < 0x20) return fail("control character in a string");
    if (c != '\\') {
      out += c;
      continue;
    }
    if (i_ >= s_.size()) break;
    if (!escape(out)) return false;
  }
  return fail("");
}

bool JsonReader::escape(std::string& out) {
  const char e = s_[i_++];
  switch (e) {
    case '"':
    case '\\':
    case '/':
      out += e;
      return true;
    case 'n':
      out += '\n';
      return true;
    case 't':
      out += '\t';
      return true;
    case 'r':
      out += '\r';
      return true;
    case 'b':
      out += '\b';
      return true;
    case 'f':
      out += '\f';
      return true;
    case 'u':
      return unicode_escape(out);
    default:
      return fail("bad escape");
  }
}

bool JsonReader::unicode_escape(std::string& out) {
  if (i_ + 4 > s_.size()) {
    i_ = s_.size();
    return fail("");
  }
  unsigned v = 0;
  for (int k = 0; k < 4; ++k) {
    const char h = s_[i_++];
    v <<= 4;
    if (h >= '0' && h <= '9')
      v |= h - '0';
    else if (h >= 'a' && h <= 'f')
      v |= h - 'a' + 10;
    else if (h >= 'A' && h <= 'F')
      v |= h - 'A' + 10;
    else
      return fail("bad \\u escape");
  }
  // Lone surrogates (json_quote's \udcXX for bytes that are not UTF-8) give the byte.
  if (v >= 0xdc80 && v <= 0xdcff)
    out += static_cast<char>(v & 0xff);
  else if (v < 0x80)
    out += static_cast<char>(v);
  else if (v < 0x800) {
    out += static_cast<char>(0xc0 | (v >> 6));
    out += static_cast<char>(0x80 | (v & 0x3f));
  } else {
    out += static_cast<char>(0xe0 | (v >> 12));
    out += static_cast<char>(0x80 | ((v >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (v & 0x3f));
  }
  return true;
}

bool JsonReader::integer(int64_t& out) {
  ws();
  const size_t start = i_;
  if (i_ < s_.size() && s_[i_] == '-') ++i_;
  const size_t digits = i_;
  while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
  if (i_ == digits) return fail("expected an integer");
  if (i_ >= s_.size()) return fail("");  // a number cut at the end may be cut short
  if (i_ - digits > 18) return fail("integer out of range");
  out = std::strtoll(std::string(s_.substr(start, i_ - start)).c_str(), nullptr, 10);
  return true;
}

bool JsonReader::nullable_integer(std::optional<int64_t>& out) {
  if (literal("null")) {
    out.reset();
    return true;
  }
  if (failed()) return false;
  int64_t v = 0;
  if (!integer(v)) return false;
  out = v;
  return true;
}

bool JsonReader::literal(std::string_view word) {
  ws();
  if (s_.substr(i_, word.size()) == word) {
    i_ += word.size();
    return true;
  }
  if (s_.size() - i_ < word.size() && word.substr(0, s_.size() - i_) == s_.substr(i_))
    return fail("");  // cut inside the word
  return false;
}

bool JsonReader::skip_value(int depth) {
  if (depth > kMaxDepth) return fail("nested too deeply");
  ws();
  if (i_ >= s_.size()) return fail("");
  const char c = s_[i_];
  if (c == '"') {
    std::string ignored;
    return string(ignored);
  }
  if (c == '{') return object([&](const std::string&) { return skip_value(depth + 1); });
  if (c == '[') return array([&] { return skip_value(depth + 1); });
  if (literal("true") || literal("false") || literal("null")) return true;
  if (failed()) return false;
  int64_t ignored = 0;
  return integer(ignored);
}

bool JsonReader::object(const std::function<bool(const std::string&)>& on_key) {
  if (!expect('{')) return false;
  if (peek('}')) return expect('}');
  std::string key;
  for (;;) {
    if (!string(key) || !expect(':') || !on_key(key)) return false;
    if (peek(',')) {
      ++i_;
      continue;
    }
    return expect('}');
  }
}

bool JsonReader::array(const std::function<bool()>& on_item) {
  if (!expect('[')) return false;
  if (peek(']')) return expect(']');
  for (;;) {
    if (!on_item()) return false;
    if (peek(',')) {
      ++i_;
      continue;
    }
    return expect(']');
  }
}

}  // namespace dtlaunch::flight
