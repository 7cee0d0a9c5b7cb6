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

// The wire's "key=value" lines, written.
class Writer {
 public:
  void put(std::string_view key, std::string_view value) {
    out_.append(key).push_back('=');
    out_ += escape(value);
    out_.push_back('\n');
  }
  void num(std::string_view key, std::uint64_t value) { put(key, std::to_string(value)); }
  // Present only when set: the reader tells nullopt from "".
  void optional(std::string_view key, const std::optional<std::string>& value) {
    if (value) put(key, *value);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// The wire's lines, read: unknown keys are ignored, malformed numbers are errors naming the key.
class Reader {
 public:
  explicit Reader(std::string_view text) {
    while (!text.empty()) {
      const std::size_t eol = text.find('\n');
      const std::string_view line = text.substr(0, eol);
      text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
      const std::size_t eq = line.find('=');
      if (eq == std::string_view::npos)
        throw core::Error(core::ExitCode::kBadInput,
                          "doctor report: line '" + core::excerpt(line) + "' has no '='");
      fields_[std::string(line.substr(0, eq))] = unescape(line.substr(eq + 1));
    }
  }
  bool has(std::string_view key) const { return fields_.find(key) != fields_.end(); }
  std::string text(std::string_view key) const {
    auto it = fields_.find(key);
    return it == fields_.end() ? std::string() : it->second;
  }
  std::optional<std::string> optional(std::string_view key) const {
    return has(key) ? std::optional<std::string>(text(key)) : std::nullopt;
  }
  std::uint64_t number(std::string_view key, std::uint64_t max) const {
    const std::string value = text(key);
    if (auto parsed = core::parse_uint(value, max)) return *parsed;
    throw not_a_number(key, value);
  }
  std::uint32_t u32(std::string_view key) const {
    return static_cast<std::uint32_t>(number(key, UINT32_MAX));
  }
  std::int64_t signed_number(std::string_view key) const {
    const std::string value = text(key);
    const bool negative = !value.empty() && value.front() == '-';
    auto parsed = core::parse_uint(negative ? std::string_view(value).substr(1) : value, INT64_MAX);
    if (!parsed) throw not_a_number(key, value);
    return negative ? -static_cast<std::int64_t>(*parsed) : static_cast<std::int64_t>(*parsed);
  }
  const std::map<std::string, std::string, std::less<>>& fields() const { return fields_; }

 private:
  static core::Error not_a_number(std::string_view key, std::string_view value) {
    return core::Error(core::ExitCode::kBadInput, "doctor report: " + std::string(key) + "='" +
                                                      core::excerpt(value) + "' is not a number");
  }
  std::map<std::string, std::string, std::less<>> fields_;
};

// The contract under the keys of the first wire format (rank, world_size, ...), and what it
// added since under "contract.*", so that the report's contract arrives whole.
void put_contract(Writer& w, const contract::WorkerContract& c) {
  w.num("rank", c.rank);
  w.num("local_rank", c.local_rank);
  w.num("node_rank", c.node_rank);
  w.num("world_size", c.world_size);
  w.num("nnodes", c.nnodes);
  w.put("master_addr", c.master_addr);
  w.num("master_port", c.master_port);
  w.optional("run_id", c.dtlaunch_run_id);
  // Only what differs from the defaults: about 1 KiB per report crosses the wire at scale.
  const contract::WorkerContract defaults;
  if (c.local_world_size != defaults.local_world_size)
    w.num("contract.local_world_size", c.local_world_size);
  if (c.restart_count != 0) w.num("contract.restart_count", c.restart_count);
  if (c.max_restarts != 0) w.num("contract.max_restarts", c.max_restarts);
  w.optional("contract.torchelastic_run_id", c.torchelastic_run_id);
  if (c.device) w.num("contract.device", *c.device);
  w.optional("contract.visible_devices", c.visible_devices);
  w.optional("contract.supervisor", c.supervisor);
  w.optional("contract.omp_num_threads", c.omp_num_threads);
  if (c.pci_device_order) w.num("contract.pci_device_order", 1);
}

contract::WorkerContract read_contract(const Reader& in) {
  contract::WorkerContract c;
  c.rank = in.u32("rank");
  c.local_rank = in.u32("local_rank");
  c.node_rank = in.u32("node_rank");
  c.world_size = in.u32("world_size");
  c.nnodes = in.u32("nnodes");
  c.master_addr = in.text("master_addr");
  c.master_port = static_cast<std::uint16_t>(in.number("master_port", 65535));
  c.dtlaunch_run_id = in.optional("run_id");
  // Absent from a report of the first format: the defaults stand.
  if (in.has("contract.local_world_size")) c.local_world_size = in.u32("contract.local_world_size");
  if (in.has("contract.restart_count")) c.restart_count = in.u32("contract.restart_count");
  if (in.has("contract.max_restarts")) c.max_restarts = in.u32("contract.max_restarts");
  c.torchelastic_run_id = in.optional("contract.torchelastic_run_id");
  if (in.has("contract.device")) c.device = in.u32("contract.device");
  c.visible_devices = in.optional("contract.visible_devices");
  c.supervisor = in.optional("contract.supervisor");
  c.omp_num_threads = in.optional("contract.omp_num_threads");
  c.pci_device_order = in.text("contract.pci_device_order") == "1";
  return c;
}

void put_node_facts(Writer& w, const TaskReport& r) {
  w.put("host", r.host);
  w.put("master_resolves_to", join(r.master_resolves_to));
  w.put("host_resolves_to", join(r.host_resolves_to));
  w.put("local_addr", r.local_addr);
  w.put("visible_devices", r.visible_devices);
  w.put("bound_device", r.bound_device);
  w.num("gpu_sharing_allowed", r.gpu_sharing_allowed);
  w.num("gpu_isolated_by_slurm", r.gpu_isolated_by_slurm);
  w.num("gpus_on_node", r.gpus_on_node);
  w.put("cpus", r.cpus);
  w.put("gpu_local_cpus", r.gpu_local_cpus);
  w.num("cpus_far_from_gpu", r.cpus_far_from_gpu);
  w.put("omp_num_threads", r.omp_num_threads);
  w.num("shm_bytes", r.shm_bytes);
  w.put("memlock_bytes", r.memlock_bytes ? std::to_string(*r.memlock_bytes) : "unlimited");
  w.num("infiniband_devices", r.infiniband_devices);
  w.put("program", r.program.path);
  w.num("program_size", r.program.size);
  w.put("program_hash", r.program.hash);
  w.put("program_exec_error", r.exec_error);
  w.num("program_exec_status", static_cast<std::uint64_t>(r.exec_status));
  w.put("launcher", r.launcher.path);
  w.num("launcher_size", r.launcher.size);
  w.put("launcher_hash", r.launcher.hash);
  w.put("launcher_version", r.launcher_version);
  w.put("sent_unix_ms", std::to_string(r.sent_unix_ms));
}

void read_node_facts(const Reader& in, TaskReport& r) {
  r.host = in.text("host");
  r.master_resolves_to = split(in.text("master_resolves_to"));
  r.host_resolves_to = split(in.text("host_resolves_to"));
  r.local_addr = in.text("local_addr");
  r.visible_devices = in.text("visible_devices");
  r.bound_device = in.text("bound_device");
  r.gpu_sharing_allowed = in.number("gpu_sharing_allowed", 1) == 1;
  r.gpu_isolated_by_slurm = in.number("gpu_isolated_by_slurm", 1) == 1;
  r.gpus_on_node = in.u32("gpus_on_node");
  r.cpus = in.text("cpus");
  r.gpu_local_cpus = in.text("gpu_local_cpus");
  r.cpus_far_from_gpu = in.text("cpus_far_from_gpu") == "1";  // absent from an older dtlaunch
  r.omp_num_threads = in.text("omp_num_threads");
  r.shm_bytes = in.number("shm_bytes", UINT64_MAX);
  if (in.text("memlock_bytes") != "unlimited")
    r.memlock_bytes = in.number("memlock_bytes", UINT64_MAX);
  r.infiniband_devices = in.u32("infiniband_devices");
  r.program = {in.text("program"), in.number("program_size", UINT64_MAX), in.text("program_hash")};
  r.exec_error = in.text("program_exec_error");  // absent from an older dtlaunch: ""
  if (in.has("program_exec_status"))
    r.exec_status = static_cast<int>(in.number("program_exec_status", 255));
  r.launcher = {in.text("launcher"), in.number("launcher_size", UINT64_MAX),
                in.text("launcher_hash")};
  r.launcher_version = in.text("launcher_version");
  r.sent_unix_ms = in.signed_number("sent_unix_ms");
}

// Named keys ("env.NAME", "lib.NAME"): a reader ignores what it does not know.
void put_software(Writer& w, const TaskReport& r) {
  for (const auto& [name, value] : r.env)
    if (name.find('=') == std::string::npos) w.put("env." + name, value);
  if (!r.node_software) return;
  w.num("node_software", 1);
  for (const LibraryIdentity& lib : r.libraries)
    if (lib.name.find('=') == std::string::npos)  // a key cannot hold one; no soname does
      w.put("lib." + lib.name, std::to_string(lib.file.size) + " " +
                                   (lib.file.hash.empty() ? "-" : lib.file.hash) + " " +
                                   lib.file.path);
  w.put("libraries_note", r.libraries_note);
  w.put("driver_version", r.driver_version);
  w.put("gpu_models", join(r.gpu_models));
  w.put("kernel", r.kernel);
}

// "SIZE HASH PATH": the path last, since it may hold blanks.
LibraryIdentity library_of(std::string_view key, const std::string& value) {
  const std::size_t blank1 = value.find(' ');
  const std::size_t blank2 = blank1 == std::string::npos ? blank1 : value.find(' ', blank1 + 1);
  const auto size = core::parse_uint(std::string_view(value).substr(0, blank1), UINT64_MAX);
  if (blank2 == std::string::npos || !size)
    throw core::Error(core::ExitCode::kBadInput, "doctor report: " + core::excerpt(key) + "='" +
                                                     core::excerpt(value) +
                                                     "' is not 'SIZE HASH PATH'");
  const std::string hash = value.substr(blank1 + 1, blank2 - blank1 - 1);
  return {std::string(key.substr(4)), {value.substr(blank2 + 1), *size, hash == "-" ? "" : hash}};
}

void read_software(const Reader& in, TaskReport& r) {
  for (const auto& [key, value] : in.fields()) {
    if (key.starts_with("env.")) r.env.emplace_back(key.substr(4), value);
    if (key.starts_with("lib.")) r.libraries.push_back(library_of(key, value));
  }
  r.node_software = in.text("node_software") == "1";
  r.libraries_note = in.text("libraries_note");
  r.driver_version = in.text("driver_version");
  r.gpu_models = split(in.text("gpu_models"));
  r.kernel = in.text("kernel");
}

}  // namespace

std::string encode(const TaskReport& r) {
  Writer w;
  put_contract(w, r.contract);
  put_node_facts(w, r);
  put_software(w, r);
  if (r.network_port != 0) w.num("network_port", r.network_port);
  return w.take();
}

TaskReport decode(std::string_view text) {
  const Reader in(text);
  TaskReport r;
  r.contract = read_contract(in);
  read_node_facts(in, r);
  read_software(in, r);
  if (in.has("network_port") && !in.text("network_port").empty())
    r.network_port = static_cast<std::uint16_t>(in.number("network_port", 65535));
  return r;
}

std::string encode_line(std::string_view key, std::string_view value) {
  Writer w;
  w.put(key, value);
  return w.take();
}

std::optional<std::string> take_line(std::string& text, std::string_view key) {
  const std::string start = std::string(key) + "=";
  // Values are escaped, so a line can only begin at the start or after a newline.
  std::size_t at = text.starts_with(start) ? 0 : text.find("\n" + start);
  if (at == std::string::npos) return std::nullopt;
  if (at != 0) ++at;
  const std::size_t end = std::min(text.find('\n', at), text.size());
  std::string value =
      unescape(std::string_view(text).substr(at + start.size(), end - at - start.size()));
  text.erase(at, end + 1 - at);
  return value;
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
