#include "doctor/report.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <type_traits>

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

// The topics' field tables: each names its wire keys once, for both directions. Keys and order
// are the wire format's (tests/golden: a fully populated report's bytes). A key a reader does not
// find leaves the member's default: a report of an older or newer dtlaunch still reads.
template <class Facts, class Field>  // Facts: the topic, const when writing
void network_fields(Facts& n, Field&& field) {
  field("host", n.host);
  field("master_resolves_to", n.master_resolves_to);
  field("host_resolves_to", n.host_resolves_to);
  field("local_addr", n.local_addr);
}

template <class Facts, class Field>
void placement_fields(Facts& p, Field&& field) {
  field("visible_devices", p.visible_devices);
  field("bound_device", p.bound_device);
  field("gpu_sharing_allowed", p.gpu_sharing_allowed);
  field("gpu_isolated_by_slurm", p.gpu_isolated_by_slurm);
  field("gpus_on_node", p.gpus_on_node);
  field("cpus", p.cpus);
  field("gpu_local_cpus", p.gpu_local_cpus);
  field("cpus_far_from_gpu", p.cpus_far_from_gpu);
  field("omp_num_threads", p.omp_num_threads);
}

template <class Facts, class Field>
void resource_fields(Facts& r, Field&& field) {
  field("shm_bytes", r.shm_bytes);
  field("memlock_bytes", r.memlock_bytes);
  field("infiniband_devices", r.infiniband_devices);
}

template <class Facts, class Field>
void program_fields(Facts& p, Field&& field) {
  field("program", p.program);
  field("program_exec_error", p.exec_error);
  field("program_exec_status", p.exec_status);
  field("launcher", p.launcher);
  field("launcher_version", p.launcher_version);
}

template <class Facts, class Field>
void clock_fields(Facts& c, Field&& field) {
  field("sent_unix_ms", c.sent_unix_ms);  // received_unix_ms is rank 0's, never sent
}

// Sent by a node's lowest local rank only (node_software), after its libraries.
template <class Facts, class Field>
void node_software_fields(Facts& s, Field&& field) {
  field("libraries_note", s.libraries_note);
  field("driver_version", s.driver_version);
  field("gpu_models", s.gpu_models);
  field("kernel", s.kernel);
}

// Writes one field of a table, by its type.
struct FieldWriter {
  Writer& w;
  void operator()(std::string_view key, const std::string& value) const { w.put(key, value); }
  void operator()(std::string_view key, const std::vector<std::string>& value) const {
    w.put(key, join(value));
  }
  template <class Number>  // bool, the counts, the exit status, the clock: in decimal
  requires std::is_arithmetic_v<Number>
  void operator()(std::string_view key, Number value) const { w.put(key, std::to_string(value)); }
  // A limit: nullopt is "unlimited", a word the reader tells from any number.
  void operator()(std::string_view key, const std::optional<std::uint64_t>& value) const {
    w.put(key, value ? std::to_string(*value) : "unlimited");
  }
  // A file: KEY (its path), KEY_size, KEY_hash.
  void operator()(std::string_view key, const FileIdentity& file) const {
    w.put(key, file.path);
    w.put(std::string(key) + "_size", std::to_string(file.size));
    w.put(std::string(key) + "_hash", file.hash);
  }
};

// Reads one field of a table, by its type: an absent key leaves the default, a malformed number
// (or one out of the member's range) is an error naming the key.
struct FieldReader {
  const Reader& in;
  void operator()(std::string_view key, std::string& value) const { value = in.text(key); }
  void operator()(std::string_view key, std::vector<std::string>& value) const {
    value = split(in.text(key));
  }
  template <class Number>
  requires std::is_integral_v<Number>
  void operator()(std::string_view key, Number& value) const {
    if (!in.has(key)) return;
    if constexpr (std::is_signed_v<Number>) {
      const std::int64_t n = in.signed_number(key);
      if (n < std::numeric_limits<Number>::min() || n > std::numeric_limits<Number>::max())
        throw core::Error(core::ExitCode::kBadInput, "doctor report: " + std::string(key) + "='" +
                                                         core::excerpt(in.text(key)) +
                                                         "' is out of range");
      value = static_cast<Number>(n);
    } else
      value = static_cast<Number>(in.number(key, std::numeric_limits<Number>::max()));
  }
  void operator()(std::string_view key, std::optional<std::uint64_t>& value) const {
    if (in.has(key) && in.text(key) != "unlimited") value = in.number(key, UINT64_MAX);
  }
  void operator()(std::string_view key, FileIdentity& file) const {
    const std::string k(key);
    (*this)(k, file.path);
    (*this)(k + "_size", file.size);
    (*this)(k + "_hash", file.hash);
  }
};

void put_node_facts(Writer& w, const TaskReport& r) {
  const FieldWriter field{w};
  network_fields(r.network, field);
  placement_fields(r.placement, field);
  resource_fields(r.resources, field);
  program_fields(r.programs, field);
  clock_fields(r.clock, field);
}

void read_node_facts(const Reader& in, TaskReport& r) {
  const FieldReader field{in};
  network_fields(r.network, field);
  placement_fields(r.placement, field);
  resource_fields(r.resources, field);
  program_fields(r.programs, field);
  clock_fields(r.clock, field);
}

// Named keys ("env.NAME", "lib.NAME"): a reader ignores what it does not know.
void put_software(Writer& w, const SoftwareFacts& s) {
  for (const auto& [name, value] : s.env)
    if (name.find('=') == std::string::npos) w.put("env." + name, value);
  if (!s.node_software) return;
  w.num("node_software", 1);
  for (const LibraryIdentity& lib : s.libraries)
    if (lib.name.find('=') == std::string::npos)  // a key cannot hold one; no soname does
      w.put("lib." + lib.name, std::to_string(lib.file.size) + " " +
                                   (lib.file.hash.empty() ? "-" : lib.file.hash) + " " +
                                   lib.file.path);
  node_software_fields(s, FieldWriter{w});
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

void read_software(const Reader& in, SoftwareFacts& s) {
  for (const auto& [key, value] : in.fields()) {
    if (key.starts_with("env.")) s.env.emplace_back(key.substr(4), value);
    if (key.starts_with("lib.")) s.libraries.push_back(library_of(key, value));
  }
  s.node_software = in.text("node_software") == "1";
  node_software_fields(s, FieldReader{in});
}

}  // namespace

std::string encode(const TaskReport& r) {
  Writer w;
  put_contract(w, r.contract);
  put_node_facts(w, r);
  put_software(w, r.software);
  if (r.network_test_port != 0) w.num("network_port", r.network_test_port);
  return w.take();
}

TaskReport decode(std::string_view text) {
  const Reader in(text);
  TaskReport r;
  r.contract = read_contract(in);
  read_node_facts(in, r);
  read_software(in, r.software);
  if (in.has("network_port") && !in.text("network_port").empty())
    r.network_test_port = static_cast<std::uint16_t>(in.number("network_port", 65535));
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
