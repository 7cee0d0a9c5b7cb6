/* Preloaded into the ranks of one test (train_test, "two jobs on one --checkpoint"): makes the
 * race of issue 35 E happen every time. Another job creates the checkpoint file between the
 * moment rank 0 looks for it and the moment rank 1 does. On the RACE_CALL-th lstat of RACE_PATH
 * (the first is the start-up's check of the path, the second the count of ranks that see it):
 * rank 0 looks, then creates RACE_MARK; rank 1 waits for RACE_MARK (up to 30 s), creates
 * RACE_PATH as the other job would, then looks. Nothing else changes. */
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>

namespace {

int calls = 0;
using LstatFn = int (*)(const char*, struct stat*);

bool is_the_call(const char* path) {
  const char* target = std::getenv("RACE_PATH");
  const char* nth = std::getenv("RACE_CALL");
  return target && nth && std::strcmp(path, target) == 0 && ++calls == std::atoi(nth);
}

bool is_rank(const char* rank) {
  const char* mine = std::getenv("RANK");
  return mine && std::strcmp(mine, rank) == 0;
}

void touch(const char* path) {
  const int fd = ::open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
}

int looked_up(LstatFn real, const char* path, struct stat* st) {
  const bool the_call = is_the_call(path);
  const char* mark = std::getenv("RACE_MARK");
  if (the_call && mark && is_rank("1")) {
    const timespec pause = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 3000 && ::access(mark, F_OK) != 0; ++i) ::nanosleep(&pause, nullptr);
    touch(path);
  }
  const int rc = real(path, st);
  if (the_call && mark && is_rank("0")) touch(mark);
  return rc;
}

}  // namespace

extern "C" int lstat(const char* path, struct stat* st) noexcept {
  static const auto real = reinterpret_cast<LstatFn>(::dlsym(RTLD_NEXT, "lstat"));
  return looked_up(real, path, st);
}
