#include "core/error.h"

#include <cstdio>

namespace paralab {

void throw_library_error(const char* library, const std::string& what, const char* call,
                         const char* file, int line) {
  throw Error(std::string(library) + ": " + what + " in `" + call + "` at " + file + ":" +
              std::to_string(line));
}

void log_error(const std::string& message) noexcept {
  std::fprintf(stderr, "paralab: %s\n", message.c_str());
}

}  // namespace paralab
