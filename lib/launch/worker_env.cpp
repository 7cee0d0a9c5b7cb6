#include "launch/worker_env.hpp"

#include "launch/gpu.hpp"

namespace dtlaunch::launch {

contract::WorkerContract worker_contract(const LaunchSpec& spec, const WorkerInfo& worker) {
  contract::WorkerContract c;
  c.rank = worker.rank;
  c.local_rank = worker.local_rank;
  c.world_size = spec.world_size;
  c.local_world_size = spec.local_world_size;
  c.node_rank = spec.node_rank;
  c.nnodes = spec.nnodes;
  c.master_addr = spec.master.addr;
  c.master_port = spec.master.port;
  c.restart_count = worker.restart_count;
  c.max_restarts = spec.max_restarts;
  c.dtlaunch_run_id = spec.dtlaunch_run_id;
  c.torchelastic_run_id = spec.torchelastic_run_id;
  const affinity::Binding* binding = spec.affinity.of(worker.local_rank);
  if (binding && spec.affinity.cpu != affinity::CpuBind::kNone)
    c.omp_num_threads = std::to_string(binding->cores);
  else
    c.omp_num_threads = spec.omp_num_threads;
  if (auto device = choose_device(spec.gpu, worker.local_rank, spec.local_world_size)) {
    if (spec.gpu.bind == GpuBind::kIsolate) {
      c.device = 0;
      c.visible_devices = device->id;
    } else {
      c.device = device->index;
    }
  }
  c.pci_device_order = spec.affinity.export_device_order;
  c.supervisor = spec.supervisor_tag;
  c.job_key = worker.job_key;
  return c;
}

contract::EnvDelta build_worker_env(const LaunchSpec& spec, const WorkerInfo& worker,
                                    const core::EnvMap& inherited) {
  return contract::to_env(worker_contract(spec, worker), inherited);
}

}  // namespace dtlaunch::launch
