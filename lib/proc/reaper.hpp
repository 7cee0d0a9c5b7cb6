// Making sure nothing a worker started outlives the group: dtlaunch becomes a child subreaper,
// so a descendant orphaned by its parent's death is re-parented to dtlaunch instead of init,
// where dtlaunch can kill and reap it when the group ends, even if it left its worker's
// process group.
#pragma once

#include <sys/types.h>

#include <vector>

namespace dtlaunch::proc {

// PR_SET_CHILD_SUBREAPER for the scope; the previous setting is restored afterwards.
class SubreaperScope {
 public:
  SubreaperScope();
  ~SubreaperScope();
  SubreaperScope(const SubreaperScope&) = delete;
  SubreaperScope& operator=(const SubreaperScope&) = delete;

 private:
  int previous_ = 0;
};

// The live and zombie children of this process, read from /proc (/proc/<pid>/task/*/children
// needs CONFIG_PROC_CHILDREN, which not every kernel has, so every /proc/<pid>/stat is read).
std::vector<pid_t> list_children();

// Sends SIGKILL to every child of this process but `spare` and reaps them, again and again
// while killing them hands over their own orphans, until no child but `spare` is left.
void kill_all_children(pid_t spare = -1);

}  // namespace dtlaunch::proc
