#include "affinity/read_topology.hpp"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>

#include "affinity/sysfs_topology.hpp"
#include "core/error.hpp"
#include "core/file.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"

namespace dtlaunch::affinity {

using core::Error;

namespace {

// sysfs and procfs files are small; a bounded read keeps a fixture typo from costing memory.
constexpr std::size_t kFileLimit = 64 * 1024;

std::optional<std::string> read_small(const std::string& path) {
  return core::read_file_head(path, kFileLimit);
}

// The value after "key:" on its line of a "key: value" file (nvidia information, status).
std::optional<std::string> field(std::string_view text, std::string_view key) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.starts_with(key) || line.size() <= key.size() || line[key.size()] != ':') continue;
    line.remove_prefix(key.size() + 1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r'))
      line.remove_suffix(1);
    return std::string(line);
  }
  return std::nullopt;
}

// The first of `names` in dir that reads as a CPU set: a *_list file as a list, another as a
// mask. Newer kernels name the same set differently, and some files are written only as masks.
std::optional<CpuSet> read_set(const std::string& dir,
                               std::initializer_list<std::string_view> names) {
  for (std::string_view name : names) {
    const auto text = read_small(dir + "/" + std::string(name));
    if (!text) continue;
    auto cpus =
        name.ends_with("_list") || name == "cpulist" ? CpuSet::parse(*text) : parse_cpumask(*text);
    if (cpus) return cpus;
  }
  return std::nullopt;
}

std::optional<unsigned> read_number(const std::string& path) {
  auto text = read_small(path);
  if (!text) return std::nullopt;
  while (!text->empty() && (text->back() == '\n' || text->back() == ' ')) text->pop_back();
  const auto n = core::parse_uint(*text, std::numeric_limits<unsigned>::max() - 1);
  return n ? std::optional<unsigned>(static_cast<unsigned>(*n)) : std::nullopt;
}

// cache/indexN/ of one CPU: data and unified caches, any level (an instruction cache holds no
// data a rank shares).
std::vector<CacheFact> read_caches(const std::string& cache_dir) {
  std::vector<CacheFact> caches;
  for (unsigned index = 0; index < 16; ++index) {
    const std::string dir = cache_dir + "/index" + std::to_string(index);
    const auto level = read_number(dir + "/level");
    if (!level) continue;
    if (read_small(dir + "/type").value_or("").starts_with("Instruction")) continue;
    auto cpus = read_set(dir, {"shared_cpu_list", "shared_cpu_map"});
    if (cpus) caches.push_back({*level, std::move(*cpus)});
  }
  return caches;
}

// topology/ of one CPU, with the names of kernels before 5.x (thread_siblings, core_siblings)
// where the newer ones are missing.
CpuFacts read_cpu(const std::string& cpu_dir, unsigned cpu) {
  CpuFacts facts;
  facts.cpu = cpu;
  const std::string dir = cpu_dir + "/topology";
  facts.core =
      read_set(dir, {"core_cpus_list", "core_cpus", "thread_siblings_list", "thread_siblings"});
  facts.core_id = read_number(dir + "/core_id");
  facts.package =
      read_set(dir, {"package_cpus_list", "package_cpus", "core_siblings_list", "core_siblings"});
  facts.package_id = read_number(dir + "/physical_package_id");
  facts.caches = read_caches(cpu_dir + "/cache");
  return facts;
}

std::vector<NodeFacts> read_nodes(const std::string& node_dir) {
  std::vector<NodeFacts> nodes;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(node_dir.c_str()), &::closedir);
  if (!d) return nodes;  // a kernel without NUMA: one node, made by build_topology
  while (const dirent* entry = ::readdir(d.get())) {
    const std::string_view name = entry->d_name;
    if (!name.starts_with("node")) continue;
    const auto id = core::parse_uint(name.substr(4), kMaxCpuNumber);
    if (!id) continue;  // node/online, node/possible, ...
    const std::string dir = node_dir + "/" + std::string(name);
    if (auto cpus = read_set(dir, {"cpulist", "cpumap"}))
      nodes.push_back({static_cast<unsigned>(*id), std::move(*cpus)});
  }
  return nodes;
}

// A file of a copied tree must be what sysfs and procfs hold, small regular files: our reads
// are bounded and do not block, but a file cut at the bound or a FIFO read as empty would
// describe another machine than the tree's, silently. The largest real one is /proc/cpuinfo,
// ~1.5 KB per CPU.
constexpr std::uintmax_t kTreeFileLimit = 4 << 20;
constexpr std::size_t kTreeEntryLimit = 1'000'000;

Error bad_tree_file(const std::string& path, const std::string& why) {
  return Error(core::ExitCode::kBadInput, std::string(kTopologyRootVariable) + ": '" +
                                              core::excerpt(path, 200) + "' " + why +
                                              ": not what a node's sys/ or proc/ holds; refusing "
                                              "rather than guessing the topology");
}

// Checks every file under root before any is read: regular files of bounded size,
// links that stay inside the tree, at most kTreeEntryLimit entries. Throws bad_tree_file.
void check_tree(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path real_root = fs::canonical(root, ec);
  if (ec) throw Error::bad_env(kTopologyRootVariable, root, ec.message());
  std::size_t entries = 0;
  for (fs::recursive_directory_iterator it(real_root, fs::directory_options::none, ec), end;
       !ec && it != end; it.increment(ec)) {
    if (++entries > kTreeEntryLimit)
      throw bad_tree_file(root, "holds more than " + std::to_string(kTreeEntryLimit) + " entries");
    const fs::path& path = it->path();
    fs::file_status status = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_symlink(status)) {
      const fs::path target = fs::canonical(path, ec);
      const auto [end_of_root, unused] =
          std::mismatch(real_root.begin(), real_root.end(), target.begin(), target.end());
      if (ec || end_of_root != real_root.end())
        throw bad_tree_file(path.string(), "is a link that leads out of the tree, or nowhere");
      status = fs::status(target, ec);
      if (ec) break;
    }
    if (fs::is_directory(status)) continue;
    if (!fs::is_regular_file(status))
      throw bad_tree_file(path.string(), "is not a regular file (a device, a FIFO, a socket)");
    if (fs::file_size(path, ec) > kTreeFileLimit && !ec)
      throw bad_tree_file(path.string(),
                          "is larger than " + std::to_string(kTreeFileLimit >> 20) + " MiB");
  }
  if (ec) throw Error::bad_env(kTopologyRootVariable, root, ec.message());
}

void read_gpus(const std::string& root, Topology& topology) {
  const std::string dir = root + "/proc/driver/nvidia/gpus";
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), &::closedir);
  if (!d) return;  // no NVIDIA driver: no GPU to follow
  while (const dirent* entry = ::readdir(d.get())) {
    const std::string bus = entry->d_name;
    if (bus.empty() || bus[0] == '.') continue;
    auto info = read_small(dir + "/" + bus + "/information");
    if (!info) continue;
    Gpu gpu;
    gpu.bus_id = bus;
    std::transform(gpu.bus_id.begin(), gpu.bus_id.end(), gpu.bus_id.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    gpu.uuid = field(*info, "GPU UUID").value_or("");
    auto minor = core::parse_uint(field(*info, "Device Minor").value_or(""), 1 << 20);
    if (!minor) continue;
    gpu.minor = static_cast<unsigned>(*minor);
    const std::string pci = root + "/sys/bus/pci/devices/" + gpu.bus_id;
    if (auto list = read_small(pci + "/local_cpulist"))
      if (auto cpus = CpuSet::parse(*list)) gpu.local_cpus = *cpus & topology.online;
    if (auto node = read_small(pci + "/numa_node")) {
      while (!node->empty() && node->back() == '\n') node->pop_back();
      if (auto n = core::parse_uint(*node, kMaxCpuNumber))
        gpu.numa_node = static_cast<unsigned>(*n);
    }
    topology.gpus.push_back(std::move(gpu));
  }
  std::sort(topology.gpus.begin(), topology.gpus.end(),
            [](const Gpu& a, const Gpu& b) { return a.bus_id < b.bus_id; });
}

// The CPUs online under root. A copied tree is checked whole first; an empty directory, or an
// online list that does not parse, is refused rather than read as a machine of no CPU.
CpuSet read_online(const std::string& root) {
  const bool this_machine = root == "/";
  const std::string online_path =
      (this_machine ? std::string() : root) + "/sys/devices/system/cpu/online";
  const auto online = read_small(online_path);
  if (!online && this_machine)
    throw Error(core::ExitCode::kFailure,
                "cannot read " + online_path + ": is sysfs mounted? (the topology is read there)");
  if (!online)
    throw Error::bad_env(kTopologyRootVariable, root,
                         "has no sys/devices/system/cpu/online: not a copy of a node's sys/ "
                         "and proc/");
  if (!this_machine) check_tree(root);
  auto cpus = CpuSet::parse(*online);
  if (!cpus || cpus->empty()) {
    const std::string why = "is not a CPU list ('" + core::excerpt(*online, 40) + "')";
    if (this_machine) throw Error(core::ExitCode::kFailure, online_path + " " + why);
    throw bad_tree_file(online_path, why);
  }
  return *cpus;
}

}  // namespace

Topology read_topology(const std::string& root) {
  // The whole node, not only what this process may use: the modes divide the node, and the
  // inherited mask is applied afterwards, where a conflict can be named.
  const std::string prefix = root == "/" ? std::string() : root;
  SysfsFacts facts;
  facts.online = read_online(root);
  const std::string cpu_dir = prefix + "/sys/devices/system/cpu";
  for (unsigned cpu : facts.online.ids())
    facts.cpus.push_back(read_cpu(cpu_dir + "/cpu" + std::to_string(cpu), cpu));
  facts.nodes = read_nodes(prefix + "/sys/devices/system/node");
  Topology topology = build_topology(facts);
  read_gpus(prefix, topology);
  return topology;
}

TaskMask read_task_mask(const std::string& root, const Topology& topology) {
  TaskMask mask;
  CpuSet all_nodes;
  for (const CpuGroup& n : topology.numa) all_nodes = all_nodes | CpuSet({n.os_index});
  const std::string status_path = (root == "/" ? std::string() : root) + "/proc/self/status";
  auto status = read_small(status_path);
  if (root == "/") {
    // Sized by the kernel's own limit: the glibc cpu_set_t stops at 1024 CPUs.
    for (std::size_t cpus = 1024; cpus <= 65536; cpus *= 2) {
      std::vector<unsigned long> bits(cpus / (8 * sizeof(unsigned long)));
      const long n = ::sched_getaffinity(0, bits.size() * sizeof(unsigned long),
                                         reinterpret_cast<cpu_set_t*>(bits.data()));
      if (n != 0 && errno == EINVAL) continue;
      if (n != 0) throw Error::system("sched_getaffinity", errno);
      std::vector<unsigned> ids;
      for (std::size_t w = 0; w < bits.size(); ++w)
        for (unsigned b = 0; b < 8 * sizeof(unsigned long); ++b)
          if (bits[w] >> b & 1UL)
            ids.push_back(static_cast<unsigned>(w * 8 * sizeof(unsigned long) + b));
      mask.cpus = CpuSet(std::move(ids));
      break;
    }
  } else {
    mask.cpus = topology.online;
    if (status)
      if (auto list = field(*status, "Cpus_allowed_list"))
        if (auto cpus = CpuSet::parse(*list)) mask.cpus = *cpus;
  }
  mask.mems = all_nodes;
  if (status)
    if (auto list = field(*status, "Mems_allowed_list"))
      if (auto mems = CpuSet::parse(*list)) mask.mems = *mems;
  return mask;
}

}  // namespace dtlaunch::affinity
