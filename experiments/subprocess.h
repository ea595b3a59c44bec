// Shell commands run as child processes with the default signal mask, whatever the calling thread
// blocks. bench_runner blocks SIGINT and SIGTERM in every thread (one thread of its own takes them
// with sigwait), and a child started by popen() or std::system() inherits that mask: a plotting
// script would then ignore Ctrl-C. posix_spawn sets the child's mask and dispositions explicitly.
#pragma once

#include <optional>
#include <string>

namespace paralab {

// `sh -c cmd` to its end, with stdin, stdout and stderr inherited. Its wait status, as
// std::system returns it (0 on success); -1 when it could not be started.
int run_shell(const std::string& cmd);
// A run_shell() status in words: "exit status 1", "killed by signal 15 (Terminated)", "could not
// be started".
std::string describe_status(int status);

// The standard output of `sh -c cmd` (stdin and stderr inherited), trailing newlines removed;
// nullopt when it could not be started or did not exit with status 0.
std::optional<std::string> shell_output(const std::string& cmd);

}  // namespace paralab
