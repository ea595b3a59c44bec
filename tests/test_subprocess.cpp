// Shell commands run by bench_runner (experiments/subprocess.h): their output and status, and
// a child that starts with no signal blocked while its parent blocks SIGINT and SIGTERM.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <string>

#include "experiments/subprocess.h"

namespace paralab {
namespace {

TEST(Subprocess, ShellOutputDropsTrailingNewlines) {
  EXPECT_EQ(shell_output("printf 'a b\\n\\n'"), "a b");
  EXPECT_EQ(shell_output("true"), "");
}

TEST(Subprocess, ShellOutputIsEmptyWhenTheCommandFails) {
  EXPECT_FALSE(shell_output("echo partial; exit 2").has_value());
}

TEST(Subprocess, RunShellGivesTheWaitStatus) {
  EXPECT_EQ(run_shell("true"), 0);
  const int status = run_shell("exit 3");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  const int killed = run_shell("kill -TERM $$");
  ASSERT_TRUE(WIFSIGNALED(killed));
  EXPECT_EQ(WTERMSIG(killed), SIGTERM);
  // In words, as bench_runner reports a plotting script's end (not the raw 768 or 15).
  EXPECT_EQ(describe_status(status), "exit status 3");
  EXPECT_EQ(describe_status(killed), "killed by signal 15 (Terminated)");
  EXPECT_EQ(describe_status(-1), "could not be started");
}

// The child's blocked signals (SigBlk in /proc/self/status, hex), as the spawned program runs with
// them: the shell execs sed, which reads its own status. (Read from the shell's status by a
// forked sed, the mask raced the shell's own fork: dash blocks every signal while it forks, and
// under load sed once read "fffffffe7ffbfeff" there.)
std::string child_blocked_signals() {
  return shell_output("exec sed -n 's/^SigBlk:[[:space:]]*//p' /proc/self/status").value_or("?");
}

TEST(Subprocess, TheChildBlocksNoSignalWhileItsParentBlocksSigintAndSigterm) {
  sigset_t stop, before;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &stop, &before), 0);
  const std::string blocked = child_blocked_signals();
  const int status = run_shell("kill -INT $$");
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  EXPECT_EQ(blocked, "0000000000000000");
  // A child with SIGINT blocked would have lived on past its own kill.
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

}  // namespace
}  // namespace paralab
