#include "launch/render.hpp"

#include <cstdio>

#include "core/text.hpp"

namespace dtlaunch::launch {

namespace {

// A dry run's output is pasted into tickets and logs: the job's secret is shown by its shape only.
std::string shown_value(const contract::EnvChange& change) {
  if (change.name == contract::env_var::kJobKey) return "(secret: 64 hex digits)";
  return *change.value;
}

}  // namespace

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

std::string render_shell(const std::vector<PlannedWorker>& workers,
                         const std::vector<std::string>& argv) {
  std::string out;
  for (const PlannedWorker& worker : workers) {
    if (workers.size() > 1)
      out += "# rank " + std::to_string(worker.rank) + " (local " +
             std::to_string(worker.local_rank) + ")\n";
    if (worker.binding)
      out += "# cpus " + worker.binding->cpus.to_list() + " mems " +
             std::string(affinity::to_string(worker.binding->policy)) +
             (worker.binding->mems.empty() ? "" : ":" + worker.binding->mems.to_list()) + "\n";
    for (const contract::EnvChange& change : worker.changes) {
      if (change.value)
        out += "export " + change.name + "=" + shell_quote(shown_value(change)) + "\n";
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
  for (std::size_t i = 0; i < argv.size(); ++i) out += (i ? ", " : "") + core::json_quote(argv[i]);
  out += "], \"workers\": [";
  for (std::size_t w = 0; w < workers.size(); ++w) {
    const PlannedWorker& worker = workers[w];
    out += w ? ", " : "";
    out += "{\"rank\": " + std::to_string(worker.rank) +
           ", \"local_rank\": " + std::to_string(worker.local_rank);
    if (worker.binding)
      out += ", \"cpus\": " + core::json_quote(worker.binding->cpus.to_list()) +
             ", \"mems\": " + core::json_quote(worker.binding->mems.to_list()) +
             ", \"mem_policy\": " +
             core::json_quote(std::string(affinity::to_string(worker.binding->policy)));
    out += ", \"set\": {";
    bool first = true;
    for (const contract::EnvChange& change : worker.changes) {
      if (!change.value) continue;
      out += (first ? "" : ", ") + core::json_quote(change.name) + ": " +
             core::json_quote(shown_value(change));
      first = false;
    }
    out += "}, \"unset\": [";
    first = true;
    for (const contract::EnvChange& change : worker.changes) {
      if (change.value) continue;
      out += (first ? "" : ", ") + core::json_quote(change.name);
      first = false;
    }
    out += "]}";
  }
  return out + "]}\n";
}

}  // namespace dtlaunch::launch
