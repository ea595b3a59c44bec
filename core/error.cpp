#include "core/error.h"

#include <cstdio>

namespace paralab {

void throw_library_error(const char* library, const std::string& what, const char* call,
                         const char* file, int line, bool invalidated_capture) {
  std::string message = std::string(library) + ": " + what + " in `" + call + "` at " + file + ":" +
                        std::to_string(line);
  if (invalidated_capture) throw CaptureInvalidated(std::move(message));
  throw Error(std::move(message));
}

std::string one_line(std::string m, std::size_t max_chars) {
  for (char& c : m)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  if (m.size() <= max_chars || max_chars < 16) return m;
  const std::size_t tail = max_chars / 3, head = max_chars - tail - 5;
  // Cut on UTF-8 character boundaries (continuation bytes are 10xxxxxx).
  std::size_t h = head, t = m.size() - tail;
  while (h > 0 && (static_cast<unsigned char>(m[h]) & 0xC0) == 0x80) --h;
  while (t < m.size() && (static_cast<unsigned char>(m[t]) & 0xC0) == 0x80) ++t;
  return m.substr(0, h) + " ... " + m.substr(t);
}

void log_error(const std::string& message) noexcept {
  std::fprintf(stderr, "paralab: %s\n", message.c_str());
}

}  // namespace paralab
