// Error type and the generic check macro family used across ParaLab.
//
// Library code throws paralab::Error with one line that names what failed; main() catches it,
// prints the line and returns non-zero. Destructors never throw: they log through log_error().
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace paralab {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a run asks for and this machine or build cannot provide (no usable GPU, NCCL with two
// ranks on one GPU, a library not built in): bench_runner records such a run as skipped, with
// the message as its reason, instead of failed.
class Unavailable : public Error {
 public:
  using Error::Error;
};

// A rank that stopped only because another rank of its group failed (the group's in-process
// transport was aborted, waking the ranks that waited on the failed one): the other rank's
// error is the cause, and is what the group reports when it has both (RankGroup::run).
class PeerFailed : public Error {
 public:
  using Error::Error;
};

// A capture of a group's step as one graph that failed as a whole, seen by every rank of the
// group alike (ending or instantiating the graph): nothing of it ran and no rank is half-way, so
// the same step can run eagerly instead (StepGraph, strategies/step_graphs.h). A failure while
// the work is being queued is CaptureBroken.
class CaptureFailed : public Error {
 public:
  using Error::Error;
};

// A capture of a group's step as one graph that one rank stopped part-way: an operation failed
// as it queued it (a call that a CUDA capture does not allow). That rank's peers were left
// waiting for its hand-offs, so the group's in-process transport was aborted and they stopped
// with PeerFailed; nothing of the capture ran. Once every rank has stopped and the transport is
// reopened (SpmdGroup::reopen), the same step can run eagerly instead (run_step_falling_back,
// strategies/step_graphs.h).
class CaptureBroken : public Error {
 public:
  using Error::Error;
};

// A call on a stream of a capture that an earlier call, on any stream joined to it, had already
// invalidated (CUDA's cudaErrorStreamCaptureInvalidated: the first call that a capture does not
// allow invalidates the whole capture, and every later call on its streams fails). A consequence,
// as PeerFailed is: the call that invalidated the capture failed with its own error, the cause,
// which is what the group reports (RankGroup::run) and why the step then runs eagerly.
class CaptureInvalidated : public PeerFailed {
 public:
  using PeerFailed::PeerFailed;
};

// Throws Error("<library>: <what> in `<call>` at <file>:<line>"); as CaptureInvalidated where
// `invalidated_capture` (the call failed on a capture another call had invalidated).
[[noreturn]] void throw_library_error(const char* library, const std::string& what,
                                      const char* call, const char* file, int line,
                                      bool invalidated_capture = false);

// A message as one printable line of at most max_chars: control characters (a key may hold a
// newline) become spaces, and a longer message keeps its start and its end around " ... ".
std::string one_line(std::string message, std::size_t max_chars = 300);

// For destructors and other places that must not throw.
void log_error(const std::string& message) noexcept;

}  // namespace paralab

// Checks a condition that callers could violate; throws Error with the formatted message.
#define PARALAB_REQUIRE(cond, message)            \
  do {                                            \
    if (!(cond)) throw ::paralab::Error(message); \
  } while (0)
