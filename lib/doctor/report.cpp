#include "doctor/report.hpp"

#include <algorithm>
#include <map>

#include "core/error.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"

namespace dtlaunch::doctor {
namespace {

std::string escape(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out.push_back(c);
  }
  return out;
}

std::string unescape(std::string_view value) {
  std::string out;
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '\\' && i + 1 < value.size()) {
      out.push_back(value[i + 1] == 'n' ? '\n' : value[i + 1]);
      ++i;
    } else {
      out.push_back(value[i]);
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ",") + item;
  return out;
}

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string> items;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    items.emplace_back(text.substr(0, comma));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
  }
  return items;
}

}  // namespace

std::string encode(const TaskReport& r) {
  std::string out;
  auto put = [&](std::string_view key, std::string_view value) {
    out.append(key).push_back('=');
    out += escape(value);
    out.push_back('\n');
  };
  auto num = [&](std::string_view key, std::uint64_t value) { put(key, std::to_string(value)); };
  num("rank", r.rank);
  num("local_rank", r.local_rank);
  num("node_rank", r.node_rank);
  num("world_size", r.world_size);
  num("nnodes", r.nnodes);
  put("host", r.host);
  put("master_addr", r.master_addr);
  num("master_port", r.master_port);
  put("run_id", r.run_id);
  put("master_resolves_to", join(r.master_resolves_to));
  put("host_resolves_to", join(r.host_resolves_to));
  put("local_addr", r.local_addr);
  put("visible_devices", r.visible_devices);
  put("bound_device", r.bound_device);
  num("gpu_sharing_allowed", r.gpu_sharing_allowed);
  num("gpu_isolated_by_slurm", r.gpu_isolated_by_slurm);
  num("gpus_on_node", r.gpus_on_node);
  put("cpus", r.cpus);
  put("gpu_local_cpus", r.gpu_local_cpus);
  num("cpus_far_from_gpu", r.cpus_far_from_gpu);
  put("omp_num_threads", r.omp_num_threads);
  num("shm_bytes", r.shm_bytes);
  put("memlock_bytes", r.memlock_bytes ? std::to_string(*r.memlock_bytes) : "unlimited");
  num("infiniband_devices", r.infiniband_devices);
  put("program", r.program.path);
  num("program_size", r.program.size);
  put("program_hash", r.program.hash);
  put("program_exec_error", r.exec_error);
  num("program_exec_status", static_cast<std::uint64_t>(r.exec_status));
  put("launcher", r.launcher.path);
  num("launcher_size", r.launcher.size);
  put("launcher_hash", r.launcher.hash);
  put("launcher_version", r.launcher_version);
  put("sent_unix_ms", std::to_string(r.sent_unix_ms));
  // Named keys ("env.NAME", "lib.NAME"): a reader ignores what it does not know.
  for (const auto& [name, value] : r.env)
    if (name.find('=') == std::string::npos) put("env." + name, value);
  if (r.node_software) {
    num("node_software", 1);
    for (const LibraryIdentity& lib : r.libraries)
      if (lib.name.find('=') == std::string::npos)  // a key cannot hold one; no soname does
        put("lib." + lib.name, std::to_string(lib.file.size) + " " +
                                   (lib.file.hash.empty() ? "-" : lib.file.hash) + " " +
                                   lib.file.path);
    put("libraries_note", r.libraries_note);
    put("driver_version", r.driver_version);
    put("gpu_models", join(r.gpu_models));
    put("kernel", r.kernel);
  }
  if (r.network_port != 0) num("network_port", r.network_port);
  if (!r.heartbeat.empty()) put("heartbeat", r.heartbeat);
  return out;
}

TaskReport decode(std::string_view text) {
  std::map<std::string, std::string, std::less<>> fields;
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos)
      throw Error(ExitCode::kBadInput, "doctor report: line '" + excerpt(line) + "' has no '='");
    fields[std::string(line.substr(0, eq))] = unescape(line.substr(eq + 1));
  }
  auto text_of = [&](std::string_view key) -> std::string {
    auto it = fields.find(key);
    return it == fields.end() ? std::string() : it->second;
  };
  auto number = [&](std::string_view key, std::uint64_t max) -> std::uint64_t {
    const std::string value = text_of(key);
    auto parsed = parse_uint(value, max);
    if (!parsed)
      throw Error(ExitCode::kBadInput, "doctor report: " + std::string(key) + "='" +
                                           excerpt(value) + "' is not a number");
    return *parsed;
  };
  auto signed_number = [&](std::string_view key) -> std::int64_t {
    std::string value = text_of(key);
    const bool negative = !value.empty() && value.front() == '-';
    auto parsed = parse_uint(negative ? std::string_view(value).substr(1) : value, INT64_MAX);
    if (!parsed)
      throw Error(ExitCode::kBadInput, "doctor report: " + std::string(key) + "='" +
                                           excerpt(value) + "' is not a number");
    return negative ? -static_cast<std::int64_t>(*parsed) : static_cast<std::int64_t>(*parsed);
  };
  TaskReport r;
  r.rank = static_cast<std::uint32_t>(number("rank", UINT32_MAX));
  r.local_rank = static_cast<std::uint32_t>(number("local_rank", UINT32_MAX));
  r.node_rank = static_cast<std::uint32_t>(number("node_rank", UINT32_MAX));
  r.world_size = static_cast<std::uint32_t>(number("world_size", UINT32_MAX));
  r.nnodes = static_cast<std::uint32_t>(number("nnodes", UINT32_MAX));
  r.host = text_of("host");
  r.master_addr = text_of("master_addr");
  r.master_port = static_cast<std::uint16_t>(number("master_port", 65535));
  r.run_id = text_of("run_id");
  r.master_resolves_to = split(text_of("master_resolves_to"));
  r.host_resolves_to = split(text_of("host_resolves_to"));
  r.local_addr = text_of("local_addr");
  r.visible_devices = text_of("visible_devices");
  r.bound_device = text_of("bound_device");
  r.gpu_sharing_allowed = number("gpu_sharing_allowed", 1) == 1;
  r.gpu_isolated_by_slurm = number("gpu_isolated_by_slurm", 1) == 1;
  r.gpus_on_node = static_cast<std::uint32_t>(number("gpus_on_node", UINT32_MAX));
  r.cpus = text_of("cpus");
  r.gpu_local_cpus = text_of("gpu_local_cpus");
  r.cpus_far_from_gpu = text_of("cpus_far_from_gpu") == "1";  // absent from an older dtlaunch
  r.omp_num_threads = text_of("omp_num_threads");
  r.shm_bytes = number("shm_bytes", UINT64_MAX);
  if (text_of("memlock_bytes") != "unlimited")
    r.memlock_bytes = number("memlock_bytes", UINT64_MAX);
  r.infiniband_devices = static_cast<std::uint32_t>(number("infiniband_devices", UINT32_MAX));
  r.program = {text_of("program"), number("program_size", UINT64_MAX), text_of("program_hash")};
  r.exec_error = text_of("program_exec_error");  // absent from an older dtlaunch: ""
  if (fields.count("program_exec_status"))
    r.exec_status = static_cast<int>(number("program_exec_status", 255));
  r.launcher = {text_of("launcher"), number("launcher_size", UINT64_MAX), text_of("launcher_hash")};
  r.launcher_version = text_of("launcher_version");
  r.sent_unix_ms = signed_number("sent_unix_ms");
  for (const auto& [key, value] : fields) {
    if (key.starts_with("env.")) r.env.emplace_back(key.substr(4), value);
    if (!key.starts_with("lib.")) continue;
    // "SIZE HASH PATH": the path last, since it may hold blanks.
    const std::size_t blank1 = value.find(' ');
    const std::size_t blank2 = blank1 == std::string::npos ? blank1 : value.find(' ', blank1 + 1);
    const auto size = parse_uint(std::string_view(value).substr(0, blank1), UINT64_MAX);
    if (blank2 == std::string::npos || !size)
      throw Error(ExitCode::kBadInput, "doctor report: " + excerpt(key) + "='" + excerpt(value) +
                                           "' is not 'SIZE HASH PATH'");
    const std::string hash = value.substr(blank1 + 1, blank2 - blank1 - 1);
    r.libraries.push_back(
        {key.substr(4), {value.substr(blank2 + 1), *size, hash == "-" ? "" : hash}});
  }
  r.node_software = text_of("node_software") == "1";
  r.libraries_note = text_of("libraries_note");
  r.driver_version = text_of("driver_version");
  r.gpu_models = split(text_of("gpu_models"));
  r.kernel = text_of("kernel");
  if (!text_of("network_port").empty())
    r.network_port = static_cast<std::uint16_t>(number("network_port", 65535));
  r.heartbeat = text_of("heartbeat");  // absent from an older dtlaunch, and without --watch
  return r;
}

Expectation slurm_expectation(const std::vector<std::string>& hosts,
                              const std::vector<std::uint32_t>& tasks_per_node,
                              std::string_view distribution) {
  Expectation e;
  e.nnodes = static_cast<std::uint32_t>(hosts.size());
  e.nodes_are_hosts = true;
  for (std::uint32_t n : tasks_per_node) e.world_size += n;
  const std::string_view kind = distribution.substr(0, distribution.find_first_of(":,"));
  std::vector<std::uint32_t> placed(hosts.size(), 0);
  if (kind.empty() || kind == "block") {
    for (std::size_t node = 0; node < hosts.size(); ++node)
      for (std::uint32_t local = 0; local < tasks_per_node[node]; ++local)
        e.ranks.push_back({hosts[node], static_cast<std::uint32_t>(node), local});
  } else if (kind == "cyclic") {
    while (e.ranks.size() < e.world_size)
      for (std::size_t node = 0; node < hosts.size(); ++node)
        if (placed[node] < tasks_per_node[node])
          e.ranks.push_back({hosts[node], static_cast<std::uint32_t>(node), placed[node]++});
  }
  return e;
}

Expectation local_expectation(std::uint32_t nnodes, std::uint32_t nproc_per_node) {
  Expectation e;
  e.nnodes = nnodes;
  e.world_size = nnodes * nproc_per_node;
  for (std::uint32_t node = 0; node < nnodes; ++node)
    for (std::uint32_t local = 0; local < nproc_per_node; ++local)
      e.ranks.push_back({"node rank " + std::to_string(node), node, local});
  return e;
}

}  // namespace dtlaunch::doctor
