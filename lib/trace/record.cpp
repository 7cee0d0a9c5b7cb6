// A small JSON reader for the flight record's own format: objects are walked key by key into
// the structs, unknown keys skipped, so that 1,024 files of 2,000 entries parse in about a second
// without building a document tree. Any deviation is an error naming the byte.
#include "trace/record.hpp"

#include <cstdlib>
#include <functional>

namespace dtlaunch::trace {
namespace {

constexpr int kMaxDepth = 32;

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  size_t pos() const { return i_; }

  bool fail(const std::string& what) {
    if (error_.empty())
      error_ = i_ >= s_.size() ? "truncated at byte " + std::to_string(s_.size())
                               : "byte " + std::to_string(i_) + ": " + what;
    return false;
  }

  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r'))
      ++i_;
  }
  bool peek(char c) {
    ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  bool expect(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return fail(std::string("expected '") + c + "'");
  }

  bool string(std::string& out) {
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
      const char e = s_[i_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out += e;
          break;
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'u': {
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
          break;
        }
        default:
          return fail("bad escape");
      }
    }
    return fail("");
  }

  bool integer(int64_t& out) {
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
  bool nullable_integer(std::optional<int64_t>& out) {
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
  template <class T>
  bool bounded(T& out, int64_t lo, int64_t hi) {
    int64_t v = 0;
    if (!integer(v)) return false;
    if (v < lo || v > hi) return fail("value out of range");
    out = static_cast<T>(v);
    return true;
  }
  // Consumes `word` when it is next; false (no error) when something else is.
  bool literal(std::string_view word) {
    ws();
    if (s_.substr(i_, word.size()) == word) {
      i_ += word.size();
      return true;
    }
    if (s_.size() - i_ < word.size() && word.substr(0, s_.size() - i_) == s_.substr(i_))
      return fail("");  // cut inside the word
    return false;
  }

  bool skip_value(int depth = 0) {
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

  bool object(const std::function<bool(const std::string&)>& on_key) {
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
  bool array(const std::function<bool()>& on_item) {
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

 private:
  std::string_view s_;
  size_t i_ = 0;
  std::string error_;
};

bool header_key(Parser& p, const std::string& key, Header& h) {
  if (key == "format") {
    std::string f;
    if (!p.string(f)) return false;
    return f == "dtlaunch-flight-record" || p.fail("not a dtlaunch flight record");
  }
  if (key == "version") return p.bounded(h.version, 1, 1000);
  if (key == "run_id") return p.string(h.run_id);
  if (key == "attempt") return p.bounded(h.attempt, 0, 1'000'000'000);
  if (key == "rank") return p.bounded(h.rank, 0, 1'000'000'000);
  if (key == "world_size") return p.bounded(h.world_size, 1, kMaxWorldSize);
  if (key == "local_rank") return p.bounded(h.local_rank, -1, 1'000'000'000);
  if (key == "host") return p.string(h.host);
  if (key == "kind") return p.string(h.kind);
  if (key == "reason") return p.string(h.reason);
  if (key == "dumped_at_us") return p.bounded(h.dumped_at_us, 0, INT64_MAX);
  if (key == "clock_offset_us") return p.nullable_integer(h.clock_offset_us);
  if (key == "clock_error_us") return p.nullable_integer(h.clock_error_us);
  if (key == "collectives_started") return p.bounded(h.collectives_started, 0, INT64_MAX);
  return p.skip_value();
}

bool entry(Parser& p, Entry& e) {
  std::string state;
  bool have_seq = false;
  const bool ok = p.object([&](const std::string& key) {
    if (key == "seq") return have_seq = p.bounded(e.seq, 1, INT64_MAX);
    if (key == "op") return p.string(e.op);
    if (key == "dtype") return p.string(e.dtype);
    if (key == "numel") return p.bounded(e.numel, 0, INT64_MAX);
    if (key == "root") return p.bounded(e.root, -1, 1'000'000'000);
    if (key == "enqueue_us") return p.bounded(e.enqueue_us, 0, INT64_MAX);
    if (key == "start_us") return p.bounded(e.start_us, 0, INT64_MAX);
    if (key == "end_us") return p.bounded(e.end_us, 0, INT64_MAX);
    if (key == "state") return p.string(state);
    if (key == "shape") {
      if (p.literal("null")) return true;
      if (p.failed()) return false;
      std::vector<int64_t> dims;
      if (!p.array([&] {
            int64_t d = 0;
            if (!p.bounded(d, 0, INT64_MAX)) return false;
            if (dims.size() >= 64) return p.fail("too many dimensions");
            dims.push_back(d);
            return true;
          }))
        return false;
      e.shape = std::move(dims);
      return true;
    }
    return p.skip_value();
  });
  if (!ok) return false;
  if (!have_seq) return p.fail("an entry without seq");
  if (state == "completed")
    e.state = EntryState::kCompleted;
  else if (state == "failed")
    e.state = EntryState::kFailed;
  else if (state == "started")
    e.state = EntryState::kStarted;
  else
    return p.fail("an entry's state is not started, completed or failed");
  // Version 1 had start_us only, set when the program called the runtime.
  if (e.enqueue_us == 0) e.enqueue_us = e.start_us;
  return true;
}

bool check_header(Parser& p, Header& h) {
  // Files of version 1 (before run ids and clock offsets) had no version key.
  if (h.version == 0) h.version = 1;
  if (h.rank < 0 || h.world_size <= 0) return p.fail("no rank or world_size");
  if (h.rank >= h.world_size) return p.fail("rank is not below world_size");
  return true;
}

}  // namespace

std::optional<RankFile> parse_rank_file(std::string_view text, std::string* error) {
  Parser p(text);
  RankFile f;
  bool saw_entries = false;
  uint64_t last_seq = 0;
  const bool ok = p.object([&](const std::string& key) {
    // The runtime writes the entries last, and parse_header reads the keys before them: a key
    // after the entries (or a second "entries") is not a file the runtime wrote.
    if (saw_entries) return p.fail("a key after the entries");
    if (key != "entries") return header_key(p, key, f.header);
    saw_entries = true;
    return p.array([&] {
      Entry e;
      if (!entry(p, e)) return false;
      if (e.seq <= last_seq) return p.fail("entries are not in ascending seq");
      last_seq = e.seq;
      f.entries.push_back(std::move(e));
      return true;
    });
  });
  if (ok) {
    p.ws();
    if (p.pos() != text.size())
      p.fail("text after the record");
    else if (!saw_entries)
      p.fail("no entries");
    else
      check_header(p, f.header);
  }
  if (p.failed()) {
    if (error) *error = p.error();
    return std::nullopt;
  }
  // Version 1 files had no format key.
  return f;
}

std::optional<Header> parse_header(std::string_view head, std::string* error) {
  Parser p(head);
  Header h;
  bool reached_entries = false;
  p.object([&](const std::string& key) {
    if (key == "entries") {
      reached_entries = true;
      return false;  // stop: the header is complete
    }
    return header_key(p, key, h);
  });
  if (!reached_entries && !p.failed()) p.fail("no entries");
  if (!p.failed()) check_header(p, h);
  if (p.failed()) {
    if (error) *error = p.error();
    return std::nullopt;
  }
  return h;
}

std::string shape_text(const Entry& e) {
  if (!e.shape) return std::to_string(e.numel) + (e.numel == 1 ? " element" : " elements");
  std::string out = "[";
  for (size_t i = 0; i < e.shape->size(); ++i)
    out += (i ? ", " : "") + std::to_string((*e.shape)[i]);
  return out + "]";
}

std::string signature_text(const Entry& e) {
  if (e.dtype.empty()) return e.op;
  std::string out = e.op + " (" + e.dtype + ", " + shape_text(e);
  if (e.root >= 0) out += ", root " + std::to_string(e.root);
  return out + ")";
}

}  // namespace dtlaunch::trace
