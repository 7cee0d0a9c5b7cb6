#include "launch/render.hpp"

#include <cstdio>

#include "core/text.hpp"

namespace dtlaunch {

std::string shell_quote(const std::string& text) {
  std::string out = "'";
  for (char c : text) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

namespace {
// JSON text must be UTF-8, but argv and the environment are bytes. Valid UTF-8 is kept; every
// other byte becomes \udcXX, the lone surrogate of Python's "surrogateescape" (PEP 383), so the
// output always parses and json.loads(...).encode("utf-8", "surrogateescape") gives the bytes.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    char buf[8];
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
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else if (c < 0x80) {
          out += static_cast<char>(c);
        } else if (std::size_t length = utf8_sequence_length(std::string_view(text).substr(i))) {
          out.append(text, i, length);
          i += length;
          continue;
        } else {
          std::snprintf(buf, sizeof buf, "\\udc%02x", c);
          out += buf;
        }
    }
    ++i;
  }
  return out + "\"";
}

}  // namespace

std::string render_shell(const std::vector<PlannedWorker>& workers,
                         const std::vector<std::string>& argv) {
  std::string out;
  for (const PlannedWorker& worker : workers) {
    if (workers.size() > 1)
      out += "# rank " + std::to_string(worker.rank) + " (local " +
             std::to_string(worker.local_rank) + ")\n";
    if (worker.binding)
      out += "# cpus " + worker.binding->cpus.to_list() + " mems " +
             std::string(to_string(worker.binding->policy)) +
             (worker.binding->mems.empty() ? "" : ":" + worker.binding->mems.to_list()) + "\n";
    for (const EnvChange& change : worker.changes) {
      if (change.value)
        out += "export " + change.name + "=" + shell_quote(*change.value) + "\n";
      else
        out += "unset " + change.name + "\n";
    }
  }
  out += "exec";
  for (const std::string& arg : argv) out += " " + shell_quote(arg);
  return out + "\n";
}

std::string render_json(const std::vector<PlannedWorker>& workers,
                        const std::vector<std::string>& argv) {
  std::string out = "{\"argv\": [";
  for (std::size_t i = 0; i < argv.size(); ++i) out += (i ? ", " : "") + json_string(argv[i]);
  out += "], \"workers\": [";
  for (std::size_t w = 0; w < workers.size(); ++w) {
    const PlannedWorker& worker = workers[w];
    out += w ? ", " : "";
    out += "{\"rank\": " + std::to_string(worker.rank) +
           ", \"local_rank\": " + std::to_string(worker.local_rank);
    if (worker.binding)
      out += ", \"cpus\": " + json_string(worker.binding->cpus.to_list()) +
             ", \"mems\": " + json_string(worker.binding->mems.to_list()) +
             ", \"mem_policy\": " + json_string(std::string(to_string(worker.binding->policy)));
    out += ", \"set\": {";
    bool first = true;
    for (const EnvChange& change : worker.changes) {
      if (!change.value) continue;
      out += (first ? "" : ", ") + json_string(change.name) + ": " + json_string(*change.value);
      first = false;
    }
    out += "}, \"unset\": [";
    first = true;
    for (const EnvChange& change : worker.changes) {
      if (change.value) continue;
      out += (first ? "" : ", ") + json_string(change.name);
      first = false;
    }
    out += "]}";
  }
  return out + "]}\n";
}

}  // namespace dtlaunch
