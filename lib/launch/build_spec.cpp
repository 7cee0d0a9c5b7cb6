#include "launch/build_spec.hpp"

#include <algorithm>
#include <functional>
#include <string>

#include "affinity/plan.hpp"
#include "contract/contract.hpp"
#include "contract/settings.hpp"
#include "core/error.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"
#include "hostlist/hostlist.hpp"
#include "launch/gpu.hpp"
#include "launch/port.hpp"

namespace dtlaunch::launch {

using core::Error;
using core::excerpt;
using core::num;

namespace setting = contract::setting;

namespace {

// Bytes of SLURM_HOSTFILE read, at most, to find the first host.
constexpr std::size_t kHostfileReadLimit = 64 * 1024;

// The first host of a hostlist expression, without expanding the rest ("n[1-99999999]" is one
// valid line of a hostfile). Throws the hostlist parser's error for an invalid expression.
std::string first_host(std::string_view expr) {
  struct Found {
    std::string host;
  };
  hostlist::count(expr);  // validates the whole expression, expanding nothing
  try {
    hostlist::for_each_host(expr, [](std::string_view host) { throw Found{std::string(host)}; });
  } catch (Found& found) {
    return std::move(found.host);
  }
  return {};
}

// How an error names the MASTER_ADDR that dtlaunch derived itself, for its value.
const std::string kMasterAddrFromNodeList =
    std::string(contract::setting::kMasterAddr.name) + " derived from the step's node list";

// "NAME=value": how a note or an error says what a variable holds or is given.
std::string assignment(const contract::Setting& setting, std::string_view value) {
  return std::string(setting.name) + "=" + std::string(value);
}

void note(LaunchSpec& spec, Note::Level level, bool rank0_only, std::string text) {
  spec.notes.push_back({level, rank0_only, std::move(text)});
}

std::uint16_t parse_port(std::string_view source, std::string_view text) {
  auto port = core::parse_uint(text, 65535);
  if (!port || *port == 0) throw Error::bad_env(source, text, "expected a port in 1..65535");
  return static_cast<std::uint16_t>(*port);
}

// The node that runs global rank 0. Under block, cyclic and plane distributions Slurm places
// rank 0 on the first node of the step; only an arbitrary distribution (SLURM_HOSTFILE) can put
// it elsewhere, and then the hostfile's first line says where.
std::uint32_t node_of_rank0(const SlurmStep& step, const System& system) {
  std::string_view dist = step.distribution;
  dist = dist.substr(0, std::min(dist.find(':'), dist.find(',')));
  if (dist != "arbitrary") return 0;

  const std::string ask = "; pass --master-addr HOST (the node that runs rank 0)";
  if (!step.hostfile)
    throw Error::inconsistent(
        assignment(contract::setting::kSlurmDistribution, excerpt(step.distribution)) +
        " but SLURM_HOSTFILE is not set, so the node of rank 0 is unknown" + ask);
  // Only the first host matters, and it is near the top: a bounded read, so that a hostfile
  // that is /dev/zero or gigabytes of something else is an error, not a memory blow-up.
  auto text = system.read_file_head(*step.hostfile, kHostfileReadLimit + 1);
  if (!text)
    throw Error::bad_env(contract::setting::kSlurmHostfile.name, *step.hostfile,
                         "cannot be read on this node, so the node of rank 0 is unknown" + ask);
  const bool cut = text->size() > kHostfileReadLimit;
  std::string_view rest = *text;
  std::size_t line_number = 0;
  while (!rest.empty()) {
    std::size_t eol = rest.find('\n');
    if (eol == std::string_view::npos && cut)
      throw Error::bad_env(contract::setting::kSlurmHostfile.name, *step.hostfile,
                           "no host in its first " + num(kHostfileReadLimit / 1024) +
                               " KiB (line " + num(line_number + 1) +
                               " is longer than that): not a Slurm hostfile?" + ask);
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 1);
    ++line_number;
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r'))
      line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    std::string first;
    try {
      first = first_host(line);
    } catch (const Error& e) {
      throw Error(core::ExitCode::kBadInput,
                  contract::quoted_value(contract::setting::kSlurmHostfile, *step.hostfile) +
                      " line " + num(line_number) + ": " + e.what());
    }
    if (first.empty()) continue;
    auto it = std::find(step.hosts.begin(), step.hosts.end(), first);
    if (it == step.hosts.end())
      throw Error::bad_env(
          contract::setting::kSlurmHostfile.name, *step.hostfile,
          "first host '" + excerpt(first) + "' is not in the step's node list" + ask);
    return static_cast<std::uint32_t>(it - step.hosts.begin());
  }
  throw Error::bad_env(contract::setting::kSlurmHostfile.name, *step.hostfile, "has no host" + ask);
}

// What can be a host name (letters, digits, '-', '_' and dot-separated labels, as /etc/hosts
// and DNS take them) or a numeric IPv4/IPv6 address. Anything else, "n[1]" from a hostlist typo,
// a blank or a newline, would be accepted here and fail only at rendezvous, on every rank.
std::string host_address_problem(std::string_view text) {
  if (text.size() > 253) return "longer than a host name can be (253 characters)";
  if (text.find(':') != std::string_view::npos) {  // IPv6, optionally with a %zone
    const std::string_view address = text.substr(0, text.find('%'));
    if (address.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos)
      return "not an IPv6 address";
    return {};
  }
  if (text.front() == '-' || text.front() == '.') return "a host name cannot begin with '-' or '.'";
  if (text.find("..") != std::string_view::npos) return "a host name has no empty label ('..')";
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok)
      return "'" + excerpt(std::string_view(&c, 1)) + "' cannot be part of a host name or address";
  }
  return {};
}

void check_master_addr(std::string_view source, std::string_view addr) {
  if (std::string problem = host_address_problem(addr); !problem.empty())
    throw Error::bad_env(source, addr, problem);
}

void choose_master_addr(LaunchSpec& spec, const LaunchOptions& options, const LaunchInputs& in,
                        const std::function<std::string()>& derived, std::string_view derived_why,
                        std::string_view derived_source) {
  if (options.master_addr) {
    if (options.master_addr->empty()) throw Error::usage("--master-addr: empty address");
    check_master_addr("--master-addr", *options.master_addr);
    spec.master.addr = *options.master_addr;
    note(spec, Note::Level::kInfo, true,
         assignment(contract::setting::kMasterAddr, spec.master.addr) + " from --master-addr");
  } else if (const auto& inherited = in.master_addr) {
    check_master_addr(contract::setting::kMasterAddr.name, *inherited);
    spec.master.addr = std::string(*inherited);
    note(spec, Note::Level::kInfo, true,
         assignment(contract::setting::kMasterAddr, spec.master.addr) +
             " kept: it was already set in the environment");
  } else {
    spec.master.addr = derived();
    check_master_addr(derived_source, spec.master.addr);
    note(spec, Note::Level::kDebug, true,
         assignment(contract::setting::kMasterAddr, spec.master.addr) + " (" +
             std::string(derived_why) + ")");
  }
}

// Returns true when the port came from the user (option or environment).
bool choose_user_port(LaunchSpec& spec, const LaunchOptions& options, const LaunchInputs& in) {
  if (options.master_port) {
    if (*options.master_port == 0) throw Error::usage("--master-port: 0 is not a port");
    spec.master.port = *options.master_port;
    note(spec, Note::Level::kInfo, true,
         assignment(contract::setting::kMasterPort, num(spec.master.port)) + " from --master-port");
    return true;
  }
  if (const auto& inherited = in.master_port) {
    spec.master.port = parse_port(contract::setting::kMasterPort.name, *inherited);
    note(spec, Note::Level::kInfo, true,
         assignment(contract::setting::kMasterPort, num(spec.master.port)) +
             " kept: it was already set in the environment");
    return true;
  }
  return false;
}

PortRange port_range(const LaunchOptions& options, const LaunchInputs& in) {
  if (options.port_range) return parse_port_range("--port-range", *options.port_range);
  if (const auto& text = in.port_range)
    return parse_port_range(contract::setting::kPortRange.name, *text);
  return kDefaultPortRange;
}

void choose_slurm_port(LaunchSpec& spec, const SlurmStep& step, const LaunchOptions& options,
                       const LaunchInputs& in, const System& system) {
  if (choose_user_port(spec, options, in)) return;
  PortRange range = port_range(options, in);
  spec.master.port = master_port_for(step.job_id, step.step_id, step.het_offset, range);
  note(spec, Note::Level::kDebug, true,
       assignment(contract::setting::kMasterPort, num(spec.master.port)) + " (job " +
           num(step.job_id) + ", step " + num(step.step_id) + ", in " + num(range.lo) + "-" +
           num(range.hi) + ")");
  // Said by the first task of every node, since the ephemeral range is a per-node setting.
  if (auto eph = system.ephemeral_port_range(); eph && eph->overlaps(range) && step.localid == 0)
    note(spec, Note::Level::kWarn, false,
         "port range " + num(range.lo) + "-" + num(range.hi) +
             " overlaps this node's ephemeral range " + num(eph->lo) + "-" + num(eph->hi) +
             " (/proc/sys/net/ipv4/ip_local_port_range): set " +
             std::string(contract::setting::kPortRange.name) +
             " to a range outside it on every node");
}

GpuPlan make_gpu_plan(const LaunchOptions& options, const LaunchInputs& in, const System& system,
                      std::optional<std::uint32_t> gpus_per_task, Mode mode) {
  GpuPlan plan;
  plan.bind = options.gpu_bind;
  plan.allow_sharing = options.allow_gpu_sharing;
  plan.mode = mode;
  if (plan.bind == GpuBind::kNone) return plan;
  const std::string narrowed =
      options.gpus_per_node ? " narrowed by --gpus-per-node=" + num(*options.gpus_per_node) : "";
  // CUDA reads an empty list as "no device", so here empty is not unset.
  if (const auto& cvd = in.cuda_visible_devices) {
    plan.visible = parse_visible_devices(*cvd);
    plan.from_cuda_visible_devices = true;
    plan.counted_from =
        contract::quoted_value(contract::setting::kCudaVisibleDevices, *cvd) + narrowed;
    if (options.gpus_per_node) {
      if (*options.gpus_per_node > plan.visible.size())
        throw Error::bad_env(
            contract::setting::kCudaVisibleDevices.name, *cvd,
            "lists fewer devices than --gpus-per-node=" + num(*options.gpus_per_node));
      plan.visible.resize(*options.gpus_per_node);
    }
  } else {
    // Without CUDA_VISIBLE_DEVICES, CUDA numbers the devices the process may open from 0. Under
    // Slurm those are the GPUs it allocated (SLURM_STEP_GPUS lists them; with device cgroups the
    // others' files exist but cannot be opened), else every device file on the node.
    std::uint32_t count = 0;
    if (options.gpus_per_node) {
      count = *options.gpus_per_node;
      plan.counted_from = "--gpus-per-node=" + num(count);
    } else if (const auto& step_gpus = in.slurm_step_gpus) {
      count = static_cast<std::uint32_t>(
          parse_visible_devices(*step_gpus, contract::setting::kSlurmStepGpus.name).size());
      plan.counted_from = contract::quoted_value(contract::setting::kSlurmStepGpus, *step_gpus);
    } else if (const auto& job_gpus = in.slurm_job_gpus) {
      count = static_cast<std::uint32_t>(
          parse_visible_devices(*job_gpus, contract::setting::kSlurmJobGpus.name).size());
      plan.counted_from = contract::quoted_value(contract::setting::kSlurmJobGpus, *job_gpus);
    } else {
      count = system.count_gpu_device_files();
      plan.counted_from = "/dev/nvidia0.." + num(count ? count - 1 : 0) + " on this node";
    }
    for (std::uint32_t i = 0; i < count; ++i) plan.visible.push_back(num(i));
  }
  plan.isolated_by_slurm = gpus_per_task && plan.from_cuda_visible_devices &&
                           !plan.visible.empty() && plan.visible.size() == *gpus_per_task;
  return plan;
}

std::string slurm_dtlaunch_run_id(const SlurmStep& step) {
  std::string id = "slurm-" + num(step.job_id) + "." + num(step.step_id);
  if (step.het_offset) id += "+" + num(step.het_offset);
  return id;
}

void choose_omp(LaunchSpec& spec, const LaunchInputs& in,
                std::optional<std::string> cpus_per_task) {
  if (const auto& omp = in.omp_num_threads) {
    note(spec, Note::Level::kInfo, true,
         assignment(contract::setting::kOmpNumThreads, excerpt(*omp)) + " kept");
    return;
  }
  spec.omp_num_threads = cpus_per_task ? *cpus_per_task : std::string("1");
  note(spec, Note::Level::kInfo, true,
       assignment(contract::setting::kOmpNumThreads, *spec.omp_num_threads) +
           (cpus_per_task ? " from " + std::string(contract::setting::kSlurmCpusPerTask.name)
                          : " (not set; " + std::string(contract::setting::kSlurmCpusPerTask.name) +
                                " unset)"));
}

affinity::CpuBind cpu_bind_of(const LaunchOptions& options, const LaunchInputs& in) {
  if (options.cpu_bind) return *options.cpu_bind;
  const auto& text = in.cpu_bind;
  if (!text) return affinity::CpuBind::kNone;
  auto bind = affinity::parse_cpu_bind(*text);
  if (!bind)
    throw Error::bad_env(contract::setting::kCpuBind.name, *text,
                         "expected none, numa, socket, exclusive or cache");
  return *bind;
}

affinity::MemBind mem_bind_of(const LaunchOptions& options, const LaunchInputs& in,
                              affinity::CpuBind cpu) {
  if (options.mem_bind) return *options.mem_bind;
  const auto& text = in.mem_bind;
  if (!text)
    return cpu == affinity::CpuBind::kNone ? affinity::MemBind::kNone : affinity::MemBind::kLocal;
  auto bind = affinity::parse_mem_bind(*text);
  if (!bind)
    throw Error::bad_env(contract::setting::kMemBind.name, *text, "expected none, local or strict");
  return *bind;
}

// The device minors Slurm allocated, when it says (for find_gpu's reading of indices).
std::optional<std::vector<unsigned>> allocated_minors(const LaunchInputs& in) {
  for (const auto& [name, text] :
       {std::pair{contract::setting::kSlurmStepGpus.name, &in.slurm_step_gpus},
        std::pair{contract::setting::kSlurmJobGpus.name, &in.slurm_job_gpus}}) {
    if (!*text) continue;
    std::vector<unsigned> minors;
    for (const std::string& id : parse_visible_devices(**text, name))
      if (auto n = core::parse_uint(id, affinity::kMaxCpuNumber))
        minors.push_back(static_cast<unsigned>(*n));
    return minors;
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::optional<std::size_t>> locate_gpus(const LaunchSpec& spec, const LaunchInputs& in,
                                                    const affinity::Topology& topology,
                                                    std::string* unlocated) {
  // Indices name devices in CUDA's order, which is the PCI bus order only under PCI_BUS_ID.
  const auto& order = in.cuda_device_order;
  const bool indices_in_bus_order = !order || *order == "PCI_BUS_ID";
  const auto allocated = allocated_minors(in);
  std::vector<std::optional<std::size_t>> gpus;
  for (std::uint32_t local = 0; local < spec.local_world_size; ++local) {
    auto device = choose_device(spec.gpu, local, spec.local_world_size);
    std::optional<std::size_t> gpu;
    if (device) {
      const bool index = device->id.find_first_not_of("0123456789") == std::string::npos;
      if (!index || indices_in_bus_order)
        gpu = affinity::find_gpu(topology, device->id, spec.gpu.visible, allocated);
      if (!gpu && unlocated && unlocated->empty())
        *unlocated = "GPU '" + excerpt(device->id) + "' of local rank " + num(local);
    }
    gpus.push_back(gpu);
  }
  return gpus;
}

namespace {

// --cpu-bind / --mem-bind: reads the topology (only when asked to bind) and plans the binding
// of the local ranks this launcher starts: `own_local_rank` under Slurm, all in local mode.
// Called once the GPU plan is checked, so choose_device cannot throw here.
void plan_affinity(LaunchSpec& spec, const LaunchOptions& options, const LaunchInputs& in,
                   const System& system, std::optional<std::uint32_t> own_local_rank,
                   std::uint32_t own_rank) {
  AffinityPlan& plan = spec.affinity;
  plan.cpu = cpu_bind_of(options, in);
  plan.mem = mem_bind_of(options, in, plan.cpu);
  if (plan.cpu == affinity::CpuBind::kNone && plan.mem == affinity::MemBind::kNone) return;
  const affinity::Topology topology = system.topology(in.topology_root);
  const affinity::TaskMask mask = system.task_mask(in.topology_root, topology);
  const bool speak = !own_local_rank || *own_local_rank == 0;  // once per node

  const auto& order = in.cuda_device_order;
  const bool indices_in_bus_order = !order || *order == "PCI_BUS_ID";
  plan.export_device_order = !order && plan.cpu != affinity::CpuBind::kNone;
  affinity::AffinityRequest request;
  request.cpu = plan.cpu;
  request.mem = plan.mem;
  request.task_cpus = mask.cpus;
  request.task_mems = mask.mems;
  request.shared_mask = spec.mode == Mode::kLocal;
  std::string unlocated;
  request.gpu_of_local_rank = locate_gpus(spec, in, topology, &unlocated);
  if (!unlocated.empty() && plan.cpu != affinity::CpuBind::kNone && speak)
    note(spec, Note::Level::kWarn, false,
         "--cpu-bind=" + std::string(affinity::to_string(plan.cpu)) + ": " + unlocated +
             " is not among the node's NVIDIA GPUs (/proc/driver/nvidia/gpus" +
             (indices_in_bus_order ? std::string()
                                   : ", and CUDA_DEVICE_ORDER=" + excerpt(*order) +
                                         " numbers devices in another order") +
             "): spreading the ranks over the node instead of following their GPUs");
  if (spec.mode == Mode::kSlurm) {
    // Slurm's per-task binding (srun --cpu-bind=cores, map_cpu, ...) gives each task a mask of
    // its own; a cgroup alone gives every task of the node the same one, to share.
    const auto& slurm_bind = in.slurm_cpu_bind_type;
    const bool bound_by_slurm = slurm_bind && *slurm_bind != "none" && *slurm_bind != "none,";
    request.shared_mask = !bound_by_slurm && !spec.gpu.isolated_by_slurm;
    if (bound_by_slurm)
      note(spec, Note::Level::kInfo, false,
           "Slurm bound this task (SLURM_CPU_BIND_TYPE=" + excerpt(*slurm_bind) + ") to CPUs " +
               mask.cpus.to_list() + ": --cpu-bind=" + std::string(affinity::to_string(plan.cpu)) +
               " narrows within it, never beyond");
    else if (spec.gpu.isolated_by_slurm && plan.cpu != affinity::CpuBind::kNone)
      note(spec, Note::Level::kInfo, false,
           "each task sees only its own GPU (--gpus-per-task), so the other tasks' GPUs are "
           "unknown: this task does not divide its NUMA node with them");
  }
  plan.by_local_rank.resize(spec.local_world_size);
  for (std::uint32_t local = 0; local < spec.local_world_size; ++local) {
    if (own_local_rank && local != *own_local_rank) continue;
    request.local_rank = local;
    request.rank = own_local_rank ? own_rank : spec.first_rank_on_node + local;
    affinity::Binding binding = affinity::plan_binding(topology, request);
    note(spec, Note::Level::kInfo, false, binding.why);
    if (binding.warning) note(spec, Note::Level::kWarn, false, *binding.warning);
    plan.by_local_rank[local] = std::move(binding);
  }
  if (plan.cpu != affinity::CpuBind::kNone && !in.omp_num_threads && speak)
    note(spec, Note::Level::kInfo, false,
         std::string(contract::setting::kOmpNumThreads.name) +
             ": instead, the number of physical cores bound to each rank (--cpu-bind)");
  if (plan.export_device_order && speak)
    note(spec, Note::Level::kDebug, false,
         assignment(contract::setting::kCudaDeviceOrder, "PCI_BUS_ID") +
             ", so that CUDA numbers the GPUs in the order dtlaunch located them");
}

void finish(LaunchSpec& spec, const LaunchOptions& options, const LaunchInputs& in,
            std::optional<std::uint64_t> job_id) {
  // The run identity's rule is the contract's (DTLAUNCH_RUN_ID is read by the same check).
  if (options.run_id) {
    std::string why =
        options.run_id->empty() ? "is empty" : contract::run_id_problem(*options.run_id);
    if (!why.empty()) throw Error::usage("--run-id '" + excerpt(*options.run_id) + "' " + why);
  }
  if (options.argv.empty() && !options.program_optional)
    throw Error::usage("no program given: dtlaunch [options] PROGRAM [ARGS...]");
  spec.argv = options.argv;
  if (!options.argv.empty()) spec.program_path = resolve_program(options.argv.front(), in.path);
  spec.max_restarts = options.max_restarts;
  if (options.export_run_id)
    spec.torchelastic_run_id = options.run_id ? *options.run_id
                               : job_id       ? num(*job_id)
                                              : std::string("none");
  check_gpu_plan(spec.gpu, spec.local_world_size, spec.notes);
}

// --job-node I/N: the step is node I of N, each node its own step of the same tasks. The
// address and the port are the job's, not this step's: they must come from the user (dtlaunch
// job --live exports them), and the run is the job's, so that every step's ranks meet.
void place_job_node(LaunchSpec& spec, const SlurmStep& step, const LaunchOptions& options,
                    const LaunchInputs& in) {
  const std::string& text = *options.job_node;
  const auto slash = text.find('/');
  if (slash == std::string::npos)
    throw Error::usage("--job-node '" + excerpt(text) + "': expected I/N (node I of N, from 0)");
  const auto node = core::parse_count("--job-node", text.substr(0, slash), 0, 1 << 20);
  const auto nodes = core::parse_count("--job-node", text.substr(slash + 1), 1, 1 << 20);
  if (node >= nodes)
    throw Error::usage("--job-node '" + excerpt(text) + "': node " + num(node) +
                       " is not below the node count " + num(nodes));
  if (step.nnodes != 1)
    throw Error::usage("--job-node: the step spans " + num(step.nnodes) +
                       " nodes; each node of the job runs its own step (srun -N1)");
  if (!options.master_addr && !in.master_addr)
    throw Error::usage("--job-node needs MASTER_ADDR or --master-addr: the job's store host, "
                       "the same for every node's step");
  if (!options.master_port && !in.master_port)
    throw Error::usage("--job-node needs MASTER_PORT or --master-port: the job's store port, "
                       "the same for every node's step");
  spec.nnodes = static_cast<std::uint32_t>(nodes);
  spec.node_rank = static_cast<std::uint32_t>(node);
  spec.world_size = spec.nnodes * step.ntasks;
  spec.first_rank_on_node = spec.node_rank * step.ntasks;
  note(spec, Note::Level::kInfo, true,
       "--job-node " + num(node) + "/" + num(nodes) + ": ranks " + num(spec.first_rank_on_node) +
           "-" + num(spec.first_rank_on_node + step.ntasks - 1) + " of " + num(spec.world_size));
}

}  // namespace

LaunchSpec spec_from_slurm(const LaunchInputs& in, const LaunchOptions& options,
                           const System& system) {
  if (!in.step) throw std::logic_error("spec_from_slurm without a Slurm step");
  const SlurmStep& step = *in.step;
  LaunchSpec spec;
  spec.mode = Mode::kSlurm;
  spec.notes = step.notes;
  spec.world_size = step.ntasks;
  spec.nnodes = step.nnodes;
  spec.node_rank = step.nodeid;
  spec.local_world_size = step.tasks_per_node[step.nodeid];
  if (options.job_node) place_job_node(spec, step, options, in);

  // Only a derived address needs the node of rank 0: --master-addr must work exactly where it
  // cannot be derived (arbitrary distribution without a readable SLURM_HOSTFILE).
  auto derive = [&] {
    const std::uint32_t rank0_node = node_of_rank0(step, system);
    if (step.procid == 0 && step.nodeid != rank0_node)
      throw Error::inconsistent(
          "rank 0 runs on node " + num(step.nodeid) + " (" + step.hosts[step.nodeid] + ") but " +
          assignment(contract::setting::kSlurmDistribution,
                     step.distribution.empty() ? "<unset>" : excerpt(step.distribution)) +
          " places it on " + step.hosts[rank0_node] + "; pass --master-addr HOST");
    return step.hosts[rank0_node];
  };
  choose_master_addr(spec, options, in, derive, "the node of rank 0 in the step's node list",
                     kMasterAddrFromNodeList);
  choose_slurm_port(spec, step, options, in, system);
  // The job's run, not this step's, when every node is a step of its own.
  spec.dtlaunch_run_id =
      options.job_node ? "slurm-" + num(step.job_id) + ".nodes" : slurm_dtlaunch_run_id(step);
  spec.gpu = make_gpu_plan(options, in, system, step.gpus_per_task, Mode::kSlurm);
  choose_omp(spec, in, step.cpus_per_task);
  finish(spec, options, in, step.job_id);
  plan_affinity(spec, options, in, system, step.localid, spec.first_rank_on_node + step.procid);
  return spec;
}

namespace {

std::uint32_t workers_per_node(const LaunchOptions& options) {
  if (!options.nproc_per_node) throw Error::usage("local mode needs --nproc-per-node N");
  const std::uint32_t nproc = *options.nproc_per_node;
  if (nproc == 0) throw Error::usage("--nproc-per-node: must be at least 1");
  if (nproc > 4096)
    throw Error::usage("--nproc-per-node " + num(nproc) + ": more than 4096 workers on one node");
  return nproc;
}

// One launcher per node under srun: the nodes, the address, the port and the run come from
// Slurm. Returns the job id.
std::uint64_t nodes_from_step(LaunchSpec& spec, const LaunchInputs& in,
                              const LaunchOptions& options, const System& system) {
  const SlurmStep& step = *in.step;
  const std::uint32_t nproc = spec.local_world_size;
  if (step.ntasks != step.nnodes)
    throw Error::usage("--nproc-per-node " + num(nproc) + " inside an srun step of " +
                       num(step.ntasks) + " tasks on " + num(step.nnodes) +
                       " node(s) would start " + num(std::uint64_t{nproc} * step.ntasks) +
                       " workers; either drop --nproc-per-node (each srun task is one worker) "
                       "or run one task per node (srun --ntasks-per-node=1)");
  if (options.nnodes || options.node_rank)
    throw Error::usage("--nnodes and --node-rank come from Slurm inside an srun step");
  spec.notes = step.notes;
  spec.nnodes = step.nnodes;
  // One task per node: the task's rank orders the launchers (equal to SLURM_NODEID except
  // under an arbitrary distribution), and task 0's node hosts worker 0 and the store.
  spec.node_rank = step.procid;
  choose_master_addr(
      spec, options, in, [&] { return step.hosts[node_of_rank0(step, system)]; },
      "the node of Slurm task 0", kMasterAddrFromNodeList);
  choose_slurm_port(spec, step, options, in, system);
  spec.dtlaunch_run_id = slurm_dtlaunch_run_id(step);
  return step.job_id;
}

// Without Slurm: the nodes from --nnodes and --node-rank, the address and port from the user or,
// standalone, loopback and a free port. Returns whether that free port is still to be found.
bool nodes_from_options(LaunchSpec& spec, const LaunchInputs& in, const LaunchOptions& options) {
  spec.nnodes = options.nnodes.value_or(1);
  spec.node_rank = options.node_rank.value_or(0);
  if (spec.nnodes == 0) throw Error::usage("--nnodes: must be at least 1");
  if (spec.node_rank >= spec.nnodes)
    throw Error::usage("--node-rank " + num(spec.node_rank) + " is not below --nnodes " +
                       num(spec.nnodes));
  const bool standalone = spec.nnodes == 1;
  if (!standalone && !options.master_addr && !in.master_addr)
    throw Error::usage("--nnodes " + num(spec.nnodes) +
                       " needs --master-addr HOST (the machine of node rank 0), the same on "
                       "every launcher");
  choose_master_addr(
      spec, options, in, [] { return std::string("127.0.0.1"); }, "standalone: loopback",
      contract::setting::kMasterAddr.name);
  // Standalone, the supervisor's own tag names the run (the command layer adds it).
  if (!standalone && options.run_id) spec.dtlaunch_run_id = "local-" + *options.run_id;
  const bool need_free_port = !choose_user_port(spec, options, in);
  // Only Slurm's hashed port uses the range, but a wrong one is still a mistake to report
  // in either mode, not one that waits for the day the job moves under Slurm.
  const PortRange range = port_range(options, in);
  if (options.port_range || in.port_range)
    note(spec, Note::Level::kDebug, true,
         "port range " + num(range.lo) + "-" + num(range.hi) +
             " unused: local mode takes --master-port or a free port from the kernel");
  if (need_free_port && !standalone)
    throw Error::usage("--nnodes " + num(spec.nnodes) +
                       " needs --master-port P, the same on every launcher");
  return need_free_port;
}

}  // namespace

LaunchSpec spec_from_local(const LaunchInputs& in, const LaunchOptions& options,
                           const System& system) {
  const std::uint32_t nproc = workers_per_node(options);
  if (options.job_node)
    throw Error::usage("--job-node is for a Slurm step of one node (srun -N1 dtlaunch --job-node "
                       "I/N); in local mode use --nnodes and --node-rank");
  LaunchSpec spec;
  spec.mode = Mode::kLocal;
  spec.local_world_size = nproc;

  std::optional<std::uint64_t> job_id;
  bool need_free_port = false;
  if (in.step)
    job_id = nodes_from_step(spec, in, options, system);
  else
    need_free_port = nodes_from_options(spec, in, options);
  spec.gpu = make_gpu_plan(options, in, system, std::nullopt, Mode::kLocal);
  choose_omp(spec, in, std::nullopt);
  if (std::uint64_t{spec.nnodes} * nproc > UINT32_MAX) throw Error::usage("world size overflows");
  spec.world_size = spec.nnodes * nproc;
  spec.first_rank_on_node = spec.node_rank * nproc;
  finish(spec, options, in, job_id);
  plan_affinity(spec, options, in, system, std::nullopt, 0);
  if (need_free_port) {  // last, once everything else is known to be valid
    spec.master.port = system.free_port("127.0.0.1");
    note(spec, Note::Level::kDebug, true,
         assignment(contract::setting::kMasterPort, num(spec.master.port)) +
             " (standalone: a free port found by binding)");
  }
  return spec;
}

}  // namespace dtlaunch::launch
