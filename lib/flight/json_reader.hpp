// A small JSON reader for the flight record's own format (record.cpp): objects are walked key by
// key into the structs, unknown keys skipped, so that 1,024 files of 2,000 entries parse in about
// a second without building a document tree. Any deviation is an error naming the byte. Not
// installed; not for other formats.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace dtlaunch::flight {

class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : s_(text) {}

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  size_t pos() const { return i_; }

  // Records the first error ("truncated at byte N" at the end of the text, "byte N: what"
  // elsewhere) and returns false.
  bool fail(const std::string& what);
  void ws();
  bool peek(char c);
  bool expect(char c);

  bool string(std::string& out);
  bool integer(int64_t& out);
  bool nullable_integer(std::optional<int64_t>& out);
  template <class T>
  bool bounded(T& out, int64_t lo, int64_t hi) {
    int64_t v = 0;
    if (!integer(v)) return false;
    if (v < lo || v > hi) return fail("value out of range");
    out = static_cast<T>(v);
    return true;
  }
  // Consumes `word` when it is next; false (no error) when something else is.
  bool literal(std::string_view word);
  bool skip_value(int depth = 0);
  bool object(const std::function<bool(const std::string&)>& on_key);
  bool array(const std::function<bool()>& on_item);

 private:
  // After a backslash: one escape into `out`.
  bool escape(std::string& out);
  bool unicode_escape(std::string& out);

  std::string_view s_;
  size_t i_ = 0;
  std::string error_;
};

}  // namespace dtlaunch::flight
