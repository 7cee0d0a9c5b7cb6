// The report rank 0 prints (checks.hpp).
#include <algorithm>
#include <chrono>
#include <map>

#include "core/text.hpp"
#include "doctor/checks.hpp"

namespace dtlaunch::doctor {

using core::json_quote;

namespace {

std::string mib(std::uint64_t bytes) {
  if (bytes >= (1ull << 30)) return std::to_string(bytes >> 30) + " GiB";
  return std::to_string(bytes >> 20) + " MiB";
}

std::string join(const std::vector<std::string>& items, const char* sep = ",") {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

// Distinct values of a column for the ranks of one node, in rank order.
template <class Get>
std::string distinct(const std::vector<const TaskReport*>& rows, Get get) {
  std::vector<std::string> values;
  for (const TaskReport* r : rows) {
    std::string v = get(*r);
    if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
  }
  return join(values, " ");
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

// The compared software of a rank: its variables, and what its node's lowest local rank found.
std::string software_json(const TaskReport& r) {
  std::string out = ", \"env\": {";
  for (std::size_t i = 0; i < r.software.env.size(); ++i)
    out += (i ? ", " : "") + json_quote(r.software.env[i].first) + ": " +
           json_quote(r.software.env[i].second);
  out += "}";
  if (!r.software.node_software) return out;
  out += ", \"libraries\": [";
  for (std::size_t i = 0; i < r.software.libraries.size(); ++i) {
    const LibraryIdentity& lib = r.software.libraries[i];
    out += (i ? ", " : "") + std::string("{\"name\": ") + json_quote(lib.name) +
           ", \"path\": " + json_quote(lib.file.path) +
           ", \"size\": " + std::to_string(lib.file.size) +
           ", \"hash\": " + json_quote(lib.file.hash) + "}";
  }
  out += "], \"libraries_note\": " + json_quote(r.software.libraries_note) +
         ", \"driver_version\": " + json_quote(r.software.driver_version) + ", \"gpu_models\": [";
  for (std::size_t i = 0; i < r.software.gpu_models.size(); ++i)
    out += (i ? ", " : "") + json_quote(r.software.gpu_models[i]);
  return out + "], \"kernel\": " + json_quote(r.software.kernel);
}

// A node's row of the table: its reports, and the first arrival to time the others by.
std::vector<std::string> node_row(const std::string& host, const std::vector<const TaskReport*>& rs,
                                  std::int64_t first) {
  std::vector<std::uint32_t> ranks;
  for (const TaskReport* r : rs) ranks.push_back(r->contract.rank);
  std::int64_t last = 0;
  for (const TaskReport* r : rs) last = std::max(last, r->clock.received_unix_ms - first);
  // Every cell comes from the reports: escaped and bounded, as the host name.
  const auto cell = [](const std::string& value) { return core::excerpt(value, 40); };
  return {
      cell(host),
      core::compact_ranges(ranks),
      cell(distinct(rs, [](const TaskReport& r) { return join(r.network.master_resolves_to); })),
      cell(distinct(rs,
                    [](const TaskReport& r) {
                      return r.network.local_addr.empty() ? "-" : r.network.local_addr;
                    })),
      cell(distinct(rs,
                    [](const TaskReport& r) {
                      return r.placement.bound_device.empty() ? std::string("-")
                                                              : r.placement.bound_device;
                    })),
      cell(distinct(rs, [](const TaskReport& r) { return r.placement.cpus; })),
      cell(distinct(rs, [](const TaskReport& r) { return r.placement.omp_num_threads; })),
      mib(rs.front()->resources.shm_bytes),
      rs.front()->resources.memlock_bytes
          ? std::to_string(*rs.front()->resources.memlock_bytes >> 10) + " KiB"
          : "unlimited",
      cell(distinct(rs, [](const TaskReport& r) { return r.programs.program.hash.substr(0, 8); })),
      cell(distinct(rs,
                    [](const TaskReport& r) {
                      return r.software.node_software ? r.software.kernel : std::string();
                    })),
      "+" + core::duration_text(std::chrono::milliseconds(last)),
  };
}

}  // namespace

std::string render_table(const Diagnosis& verdict) {
  // One row per node, in the order of each node's lowest rank.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const TaskReport*>> by_host;
  for (const TaskReport& r : verdict.reports) {
    if (!by_host.count(r.network.host)) order.push_back(r.network.host);
    by_host[r.network.host].push_back(&r);
  }
  std::int64_t first = INT64_MAX;
  for (const TaskReport& r : verdict.reports) first = std::min(first, r.clock.received_unix_ms);

  const std::vector<std::string> header = {
      "host", "ranks",    "MASTER_ADDR ->", "from",    "GPUs",   "CPUs",
      "OMP",  "/dev/shm", "memlock",        "program", "kernel", "arrived"};
  std::vector<std::vector<std::string>> rows;
  for (const std::string& host : order) {
    rows.push_back(node_row(host, by_host[host], first));
  }
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& row : rows) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (std::size_t c = 0; c < cells.size(); ++c)
      out += c + 1 < cells.size() ? pad(cells[c], width[c] + 2) : cells[c];
    return out + "\n";
  };
  std::string out = "dtlaunch doctor: " + std::to_string(verdict.reports.size()) + " rank(s) on " +
                    std::to_string(order.size()) + " host(s)";
  if (!verdict.reports.empty()) {
    const TaskReport& r0 = verdict.reports.front();
    out += ", rendezvous " + core::excerpt(r0.contract.master_addr, 64) + ":" +
           std::to_string(r0.contract.master_port) + ", program " +
           core::excerpt(r0.programs.program.path) + ", " +
           core::excerpt(r0.programs.launcher_version, 64);
  }
  out += "\n\n" + line(header);
  for (const auto& row : rows) out += line(row);
  out += "\n";
  if (!verdict.network_summary.empty()) out += "network: " + verdict.network_summary + "\n\n";
  if (verdict.problems.empty()) return out + "OK: no problem found\n";
  for (const Problem& p : verdict.problems)
    out += std::string(p.severity == Severity::kError ? "ERROR " : "WARN  ") + p.kind + ": " +
           p.message + "\n";
  if (!verdict.exclude.empty())
    out += "exclude: " + verdict.exclude + "   (srun/sbatch --exclude=" + verdict.exclude + ")\n";
  out += verdict.ok() ? "OK with warnings\n" : "FAILED: the job would not start cleanly\n";
  return out;
}

std::string render_json(const Diagnosis& verdict) {
  std::int64_t first = INT64_MAX;
  for (const TaskReport& r : verdict.reports) first = std::min(first, r.clock.received_unix_ms);
  auto str = [](std::string_view s) { return json_quote(s); };
  auto list = [&](const std::vector<std::string>& items) {
    std::string out = "[";
    for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + str(items[i]);
    return out + "]";
  };
  std::string out = std::string("{\"ok\": ") + (verdict.ok() ? "true" : "false") + ", \"ranks\": [";
  for (std::size_t i = 0; i < verdict.reports.size(); ++i) {
    const TaskReport& r = verdict.reports[i];
    out += i ? ", " : "";
    out += "{\"rank\": " + std::to_string(r.contract.rank) +
           ", \"local_rank\": " + std::to_string(r.contract.local_rank) +
           ", \"node_rank\": " + std::to_string(r.contract.node_rank) +
           ", \"host\": " + str(r.network.host) +
           ", \"world_size\": " + std::to_string(r.contract.world_size) +
           ", \"nnodes\": " + std::to_string(r.contract.nnodes) +
           ", \"master_addr\": " + str(r.contract.master_addr) +
           ", \"master_port\": " + std::to_string(r.contract.master_port) +
           ", \"run_id\": " + str(r.contract.dtlaunch_run_id.value_or("")) +
           ", \"master_resolves_to\": " + list(r.network.master_resolves_to) +
           ", \"host_resolves_to\": " + list(r.network.host_resolves_to) +
           ", \"local_addr\": " + str(r.network.local_addr) +
           ", \"visible_devices\": " + str(r.placement.visible_devices) +
           ", \"bound_device\": " + str(r.placement.bound_device) +
           ", \"cpus\": " + str(r.placement.cpus) +
           ", \"gpu_local_cpus\": " + str(r.placement.gpu_local_cpus) +
           ", \"cpus_far_from_gpu\": " + (r.placement.cpus_far_from_gpu ? "true" : "false") +
           ", \"omp_num_threads\": " + str(r.placement.omp_num_threads) +
           ", \"shm_bytes\": " + std::to_string(r.resources.shm_bytes) + ", \"memlock_bytes\": " +
           (r.resources.memlock_bytes ? std::to_string(*r.resources.memlock_bytes)
                                      : std::string("null")) +
           ", \"infiniband_devices\": " + std::to_string(r.resources.infiniband_devices) +
           ", \"program\": {\"path\": " + str(r.programs.program.path) +
           ", \"size\": " + std::to_string(r.programs.program.size) +
           ", \"hash\": " + str(r.programs.program.hash) +
           "}, \"dtlaunch\": {\"path\": " + str(r.programs.launcher.path) +
           ", \"size\": " + std::to_string(r.programs.launcher.size) +
           ", \"hash\": " + str(r.programs.launcher.hash) +
           ", \"version\": " + str(r.programs.launcher_version) +
           "}, \"clock_unix_ms\": " + std::to_string(r.clock.sent_unix_ms) +
           ", \"arrived_after_first_ms\": " + std::to_string(r.clock.received_unix_ms - first) +
           software_json(r) + "}";
  }
  out += "], \"problems\": [";
  for (std::size_t i = 0; i < verdict.problems.size(); ++i) {
    const Problem& p = verdict.problems[i];
    std::string ranks = "[";
    for (std::size_t k = 0; k < p.ranks.size(); ++k)
      ranks += (k ? ", " : "") + std::to_string(p.ranks[k]);
    out += (i ? ", " : "") + std::string("{\"kind\": ") + str(p.kind) +
           ", \"severity\": " + str(p.severity == Severity::kError ? "error" : "warning") +
           ", \"ranks\": " + ranks + "], \"hosts\": " + list(p.hosts) +
           ", \"message\": " + str(p.message) + "}";
  }
  out += "], \"network\": [";
  for (std::size_t i = 0; i < verdict.network.size(); ++i) {
    const NetworkLink& l = verdict.network[i];
    auto rate = [](double r) {
      return r < 0 ? std::string("null") : std::to_string(static_cast<std::uint64_t>(r));
    };
    out += (i ? ", " : "") + std::string("{\"from\": ") + str(l.from) + ", \"to\": " + str(l.to) +
           ", \"rtt_us\": " + std::to_string(static_cast<std::uint64_t>(l.rtt_us)) +
           ", \"sent_bytes_per_s\": " + rate(l.sent_bytes_per_s) +
           ", \"received_bytes_per_s\": " + rate(l.received_bytes_per_s) +
           ", \"error\": " + str(l.error) + "}";
  }
  return out + "], \"exclude\": " + str(verdict.exclude) + "}\n";
}

}  // namespace dtlaunch::doctor
