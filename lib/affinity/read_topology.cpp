#include "affinity/read_topology.hpp"

#include <dirent.h>
#include <hwloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

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

CpuSet from_bitmap(hwloc_const_bitmap_t bitmap) {
  std::vector<unsigned> ids;
  if (!bitmap) return {};
  for (int i = hwloc_bitmap_first(bitmap); i != -1; i = hwloc_bitmap_next(bitmap, i))
    ids.push_back(static_cast<unsigned>(i));
  return CpuSet(std::move(ids));
}

std::vector<CpuGroup> groups(hwloc_topology_t topo, hwloc_obj_type_t type) {
  std::vector<CpuGroup> out;
  const int n = hwloc_get_nbobjs_by_type(topo, type);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t obj = hwloc_get_obj_by_type(topo, type, static_cast<unsigned>(i));
    CpuSet cpus = from_bitmap(obj->cpuset);
    if (!cpus.empty()) out.push_back({obj->os_index, std::move(cpus)});
  }
  return out;
}

// hwloc reads HWLOC_FSROOT when a topology is loaded; this sets it for one load and puts the
// previous value back, so that a user's own HWLOC_FSROOT neither leaks into nor misleads us.
class ScopedEnv {
 public:
  ScopedEnv(std::string_view name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    if (value)
      ::setenv(name_.c_str(), value, 1);
    else
      ::unsetenv(name_.c_str());
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const std::string name_;
  std::optional<std::string> old_;
};

// A file of a copied tree: what hwloc reads itself (it reads whole files, and blocks on a
// FIFO) must be what sysfs and procfs hold, small regular files. The largest real one is
// /proc/cpuinfo, ~1.5 KB per CPU.
constexpr std::uintmax_t kTreeFileLimit = 4 << 20;
constexpr std::size_t kTreeEntryLimit = 1'000'000;

Error bad_tree_file(const std::string& path, const std::string& why) {
  return Error(core::ExitCode::kBadInput, std::string(kTopologyRootVariable) + ": '" +
                                              core::excerpt(path, 200) + "' " + why +
                                              ": not what a node's sys/ or proc/ holds; refusing "
                                              "rather than guessing the topology");
}

// Checks every file under root before hwloc (or we) read any: regular files of bounded size,
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

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};

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

}  // namespace

Topology read_topology(const std::string& root) {
  const bool this_machine = root == "/";
  // hwloc describes an empty directory as a machine of one CPU, and an online list it cannot
  // parse as one CPU: refuse both before.
  std::optional<CpuSet> listed_online;
  if (!this_machine) {
    const std::string online_path = root + "/sys/devices/system/cpu/online";
    const auto online = read_small(online_path);
    if (!online)
      throw Error::bad_env(kTopologyRootVariable, root,
                           "has no sys/devices/system/cpu/online: not a copy of a node's sys/ "
                           "and proc/");
    check_tree(root);
    listed_online = CpuSet::parse(*online);
    if (!listed_online || listed_online->empty())
      throw bad_tree_file(online_path, "is not a CPU list ('" + core::excerpt(*online, 40) + "')");
  }
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) throw Error::system("hwloc_topology_init", errno);
  std::unique_ptr<hwloc_topology, TopologyDeleter> topo(raw);
  // The whole node, not only what this process may use: the modes divide the node, and the
  // inherited mask is applied afterwards, where a conflict can be named.
  hwloc_topology_set_flags(raw, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  if (!this_machine)
    hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86");
  {
    ScopedEnv fsroot(kHwlocFsrootVariable, this_machine ? nullptr : root.c_str());
    if (hwloc_topology_load(raw) != 0) throw Error::system("hwloc_topology_load", errno);
  }
  Topology topology;
  topology.online = from_bitmap(hwloc_topology_get_topology_cpuset(raw));
  // What hwloc made of the tree must be what it says: online CPUs hwloc did not find mean
  // files it could not read as they are written.
  if (listed_online && !topology.online.contains(*listed_online))
    throw bad_tree_file(root + "/sys/devices/system/cpu",
                        "describes CPUs " + listed_online->to_list() + " online, and hwloc found " +
                            topology.online.to_list() + " in it");
  topology.cores = groups(raw, HWLOC_OBJ_CORE);
  topology.numa = groups(raw, HWLOC_OBJ_NUMANODE);
  topology.packages = groups(raw, HWLOC_OBJ_PACKAGE);
  for (hwloc_obj_type_t type : {HWLOC_OBJ_L5CACHE, HWLOC_OBJ_L4CACHE, HWLOC_OBJ_L3CACHE,
                                HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L1CACHE}) {
    topology.caches = groups(raw, type);
    if (!topology.caches.empty()) break;
  }
  // A VM may show no cores or packages: every CPU is then its own core, the node one package.
  if (topology.cores.empty())
    for (unsigned cpu : topology.online.ids()) topology.cores.push_back({cpu, CpuSet({cpu})});
  if (topology.packages.empty()) topology.packages.push_back({0, topology.online});
  if (topology.numa.empty()) topology.numa.push_back({0, topology.online});
  read_gpus(this_machine ? std::string() : root, topology);
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
