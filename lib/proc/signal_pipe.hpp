// Signals as readable bytes (the self-pipe trick): the handlers only write the signal number to
// a pipe, and the supervisor's poll loop does the work. Chosen over signalfd because signalfd
// needs the signals blocked in every thread of the process, which a library cannot promise.
#pragma once

#include <csignal>
#include <vector>

#include "proc/fd.hpp"

namespace dtlaunch::proc {

class SignalPipe {
 public:
  // Catches `forwarded` (unless one was ignored when we started: `nohup dtlaunch` keeps SIGHUP
  // ignored, for us and for the workers) and SIGCHLD; ignores SIGPIPE so a closed stdout is an
  // error on write, not death. At most one SignalPipe exists at a time. Throws Error::system.
  explicit SignalPipe(const std::vector<int>& forwarded);
  ~SignalPipe();  // restores every disposition it changed
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int fd() const { return read_.get(); }
  // The signals received since the last call, in order (SIGCHLD included). Never blocks.
  std::vector<int> drain();

  // For a child between fork and exec, with all signals blocked: puts back the dispositions
  // this process had before SignalPipe, so that nothing of ours (handler, ignored SIGPIPE)
  // reaches the worker. Async-signal-safe.
  static void restore_in_child() noexcept;

 private:
  UniqueFd read_, write_;
};

// Blocks every signal for the scope (around fork, so that no handler of ours runs in a child
// before it has reset them). The child calls unblock_in_child() once it has.
class BlockAllSignals {
 public:
  BlockAllSignals();
  ~BlockAllSignals();
  BlockAllSignals(const BlockAllSignals&) = delete;
  BlockAllSignals& operator=(const BlockAllSignals&) = delete;
  // Async-signal-safe; restores the mask that was in force before the block.
  void unblock_in_child() const noexcept;

 private:
  sigset_t old_;
};

}  // namespace dtlaunch::proc
