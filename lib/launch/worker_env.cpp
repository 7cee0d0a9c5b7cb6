#include "launch/worker_env.hpp"

#include "launch/contract.hpp"
#include "launch/gpu.hpp"

namespace dtlaunch {

EnvDelta build_worker_env(const LaunchSpec& spec, const WorkerInfo& worker,
                          const EnvMap& inherited) {
  EnvDelta delta;
  auto set = [&](std::string name, std::string value) {
    delta.push_back({std::move(name), std::move(value)});
  };
  auto set_num = [&](std::string name, std::uint64_t value) {
    set(std::move(name), std::to_string(value));
  };
  auto set_unless_inherited = [&](std::string name, std::string value) {
    if (!inherited.contains(name)) set(std::move(name), std::move(value));
  };

  set_num("RANK", worker.rank);
  set_num("LOCAL_RANK", worker.local_rank);
  set_num("WORLD_SIZE", spec.world_size);
  set_num("LOCAL_WORLD_SIZE", spec.local_world_size);
  set_num("GROUP_RANK", spec.node_rank);
  set_num("GROUP_WORLD_SIZE", spec.nnodes);
  set_num("ROLE_RANK", worker.rank);
  set_num("ROLE_WORLD_SIZE", spec.world_size);
  set("ROLE_NAME", "default");
  set_num("NODE_RANK", spec.node_rank);
  set_num("NNODES", spec.nnodes);
  set("MASTER_ADDR", spec.master.addr);
  set_num("MASTER_PORT", spec.master.port);
  set_num("TORCHELASTIC_RESTART_COUNT", worker.restart_count);
  set_num("TORCHELASTIC_MAX_RESTARTS", spec.max_restarts);
  if (spec.run_id) set("TORCHELASTIC_RUN_ID", *spec.run_id);
  if (spec.run_identity)
    set("DTLAUNCH_RUN_ID", *spec.run_identity);
  else if (inherited.has_entry("DTLAUNCH_RUN_ID"))
    delta.push_back({"DTLAUNCH_RUN_ID", {}});  // an outer launch's would refuse our own ranks
  set_unless_inherited("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  const Binding* binding = spec.affinity.of(worker.local_rank);
  if (binding && spec.affinity.cpu != CpuBind::kNone)
    set_unless_inherited("OMP_NUM_THREADS", std::to_string(binding->cores));
  else if (spec.omp_num_threads)
    set_unless_inherited("OMP_NUM_THREADS", *spec.omp_num_threads);

  if (auto device = choose_device(spec.gpu, worker.local_rank, spec.local_world_size)) {
    if (spec.gpu.bind == GpuBind::kIsolate) {
      set("DTLAUNCH_CUDA_DEVICE", "0");
      set("CUDA_VISIBLE_DEVICES", device->id);
    } else {
      set_num("DTLAUNCH_CUDA_DEVICE", device->index);
    }
  } else if (inherited.has_entry("DTLAUNCH_CUDA_DEVICE")) {
    // A value left by an outer launch would point this worker at a device it was not given.
    delta.push_back({"DTLAUNCH_CUDA_DEVICE", {}});
  }

  if (spec.affinity.export_device_order) set_unless_inherited("CUDA_DEVICE_ORDER", "PCI_BUS_ID");

  if (spec.supervisor_tag) set(std::string(kSupervisorVar), *spec.supervisor_tag);

  for (const RemovedVar& removed : removed_vars())
    if (inherited.has_entry(removed.name)) delta.push_back({std::string(removed.name), {}});
  return delta;
}

EnvMap apply_env(EnvMap inherited, const EnvDelta& delta) {
  for (const EnvChange& change : delta) {
    if (change.value)
      inherited.set(change.name, *change.value);
    else
      inherited.erase(change.name);
  }
  return inherited;
}

}  // namespace dtlaunch
