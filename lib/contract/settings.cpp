#include "contract/settings.hpp"

#include <array>

#include "core/error.hpp"
#include "core/parse.hpp"
#include "core/text.hpp"

namespace dtlaunch::contract {

namespace {
namespace s = setting;

constexpr auto kAll = std::to_array<const Setting*>(
    {// launcher
     &s::kSlurmStepId, &s::kSlurmStepIdOld, &s::kSlurmJobId, &s::kSlurmJobIdOld, &s::kSlurmProcId,
     &s::kSlurmLocalId, &s::kSlurmNodeId, &s::kSlurmStepNumTasks, &s::kSlurmNtasks,
     &s::kSlurmNprocs, &s::kSlurmStepNumNodes, &s::kSlurmJobNumNodes, &s::kSlurmNnodes,
     &s::kSlurmStepNodelist, &s::kSlurmJobNodelist, &s::kSlurmNodelist, &s::kSlurmdNodename,
     &s::kSlurmStepTasksPerNode, &s::kSlurmTasksPerNode, &s::kSlurmHetJobOffset,
     &s::kSlurmDistribution, &s::kSlurmHostfile, &s::kSlurmCpusPerTask, &s::kSlurmGpusPerTask,
     &s::kSlurmdTresBind, &s::kSlurmStepGpus, &s::kSlurmJobGpus, &s::kSlurmCpuBindType,
     &s::kSlurmNtasksPerNode, &s::kSlurmGpusPerNode, &s::kCudaVisibleDevices, &s::kCudaDeviceOrder,
     &s::kMasterAddr, &s::kMasterPort, &s::kOmpNumThreads, &s::kNcclAsyncErrorHandling,
     &s::kPortRange, &s::kRestartCount, &s::kCpuBind, &s::kMemBind, &s::kTopologyRoot, &s::kPath,
     // doctor
     &s::kDoctorLibraryPath, &s::kDoctorPath, &s::kDoctorNcclVars, &s::kDoctorGlooVars,
     &s::kDoctorCudaVars, &s::kDoctorTorchVars, &s::kDoctorOmpVars,
     // runtime
     &s::kRank, &s::kWorldSize, &s::kRuntimeMasterAddr, &s::kRuntimeMasterPort, &s::kLocalRank,
     &s::kLocalWorldSize, &s::kNodeRank, &s::kNnodes, &s::kCudaDevice, &s::kRunId,
     &s::kGlooSocketIfname, &s::kUseLibuv, &s::kStoreHosted, &s::kShm, &s::kHier, &s::kTraceEntries,
     &s::kTraceDir, &s::kTraceAtExit, &s::kDumpSignal, &s::kTorchelasticRestartCount,
     &s::kMaxRestarts, &s::kSlurmRestartCount, &s::kCheck, &s::kReportGraceMs, &s::kTimeline,
     &s::kJobKey, &s::kHeartbeatTimeout, &s::kLive, &s::kLiveJoin, &s::kLiveWait,
     &s::kMallocMmapThreshold, &s::kMallocTrimThreshold,
     // example
     &s::kXdgCacheHome});

constexpr bool grouped_by_owner() {
  for (std::size_t i = 1; i < kAll.size(); ++i)
    if (kAll[i]->owner < kAll[i - 1]->owner) return false;
  return true;
}
static_assert(grouped_by_owner(), "env-table prints the settings grouped by owner");

}  // namespace

std::string_view owner_name(Owner owner) {
  switch (owner) {
    case Owner::kLauncher:
      return "launcher";
    case Owner::kRuntime:
      return "runtime";
    case Owner::kDoctor:
      return "doctor";
    case Owner::kExample:
      return "example";
  }
  return "?";
}

std::string parse_name(const Setting& setting) {
  switch (setting.parse) {
    case Setting::Parse::kText:
      return "text";
    case Setting::Parse::kRawText:
      return "text, empty is a value";
    case Setting::Parse::kNumber:
      return "integer 0.." + std::to_string(setting.max);
    case Setting::Parse::kSwitch:
      return "0 or 1";
  }
  return "?";
}

std::span<const Setting* const> read_settings() {
  return kAll;
}

std::optional<std::string> read_text(const core::EnvMap& env, const Setting& setting) {
  const auto value =
      setting.parse == Setting::Parse::kRawText ? env.get_raw(setting.name) : env.get(setting.name);
  return value ? std::optional<std::string>(*value) : std::nullopt;
}

std::string quoted_value(const Setting& setting, std::string_view value) {
  return std::string(setting.name) + "='" + core::excerpt(value) + "'";
}

std::string setting_problem(const Setting& setting, std::string_view value) {
  const std::string quoted = quoted_value(setting, value);
  switch (setting.parse) {
    case Setting::Parse::kNumber:
      if (core::parse_uint(value, setting.max)) return "";
      return quoted + " is not an integer in 0.." + std::to_string(setting.max);
    case Setting::Parse::kSwitch:
      if (value == "0" || value == "1") return "";
      return quoted + " must be 0 or 1";
    case Setting::Parse::kText:
    case Setting::Parse::kRawText:
      break;
  }
  return "";
}

std::optional<std::uint64_t> read_number(const core::EnvMap& env, const Setting& setting) {
  const auto value = env.get(setting.name);
  if (!value) return std::nullopt;
  if (std::string problem = setting_problem(setting, *value); !problem.empty())
    throw core::Error(core::ExitCode::kBadInput, problem);
  return core::parse_uint(*value);
}

bool read_switch(const core::EnvMap& env, const Setting& setting, bool otherwise) {
  const auto n = read_number(env, setting);
  return n ? *n == 1 : otherwise;
}

}  // namespace dtlaunch::contract
