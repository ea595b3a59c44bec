#include "experiments/progress.h"

#include <unistd.h>

#include <cstdio>

namespace paralab {

bool Progress::wanted(bool quiet) { return !quiet && isatty(STDOUT_FILENO) == 1; }

void Progress::clear() {
  if (dirty_) std::fputs("\r\033[2K", stdout);
  dirty_ = false;
}

void Progress::status(const std::string& text) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (dirty_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  clear();
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  dirty_ = true;
}

void Progress::line(const std::string& text) {
  if (!enabled_) return;
  clear();
  std::fputs((text + "\n").c_str(), stdout);
  std::fflush(stdout);
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0)) return "?";
  const auto s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

}  // namespace paralab
