#include "experiments/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace paralab {
namespace {

// Starts `sh -c cmd` with an empty signal mask and SIGINT, SIGTERM and SIGQUIT at their default
// actions; with out_fd >= 0 its stdout is that descriptor. The child's pid, or -1.
pid_t spawn_shell(const std::string& cmd, int out_fd) {
  posix_spawnattr_t attr;
  if (posix_spawnattr_init(&attr) != 0) return -1;
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGQUIT}) sigaddset(&defaults, sig);
  posix_spawn_file_actions_t actions;
  bool ok = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF) == 0 &&
            posix_spawnattr_setsigmask(&attr, &none) == 0 &&
            posix_spawnattr_setsigdefault(&attr, &defaults) == 0;
  const bool have_actions = posix_spawn_file_actions_init(&actions) == 0;
  ok = ok && have_actions &&
       (out_fd < 0 || posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO) == 0);
  pid_t pid = -1;
  if (ok) {
    const char* argv[] = {"sh", "-c", cmd.c_str(), nullptr};
    if (posix_spawn(&pid, "/bin/sh", &actions, &attr, const_cast<char* const*>(argv), environ) != 0)
      pid = -1;
  }
  if (have_actions) posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return status;
}

}  // namespace

int run_shell(const std::string& cmd) {
  const pid_t pid = spawn_shell(cmd, -1);
  return pid < 0 ? -1 : wait_for(pid);
}

std::string describe_status(int status) {
  if (status == -1) return "could not be started";
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "wait status " + std::to_string(status);
}

std::optional<std::string> shell_output(const std::string& cmd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  // dup2 in the child clears close-on-exec on its stdout; the parent's ends stay out of it.
  const pid_t pid = spawn_shell(cmd, fds[1]);
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  if (pid < 0 || wait_for(pid) != 0) return std::nullopt;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

}  // namespace paralab
