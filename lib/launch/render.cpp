#include "launch/render.hpp"

#include <cstdio>

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
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
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
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
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
           ", \"local_rank\": " + std::to_string(worker.local_rank) + ", \"set\": {";
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
