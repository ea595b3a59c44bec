// Progress on a terminal: one status line rewritten in place (run i/n, epoch, iteration, loss,
// images/s, ETA) and a line per finished epoch. Silent when stdout is not a terminal or --quiet.
#pragma once

#include <chrono>
#include <string>

namespace paralab {

class Progress {
 public:
  explicit Progress(bool enabled) : enabled_(enabled) {}
  // stdout is a terminal and the user did not ask for quiet.
  static bool wanted(bool quiet);

  bool enabled() const { return enabled_; }
  void status(const std::string& text);  // throttled to ~10 updates/s
  void line(const std::string& text);    // a permanent line

 private:
  void clear();
  bool enabled_;
  bool dirty_ = false;
  std::chrono::steady_clock::time_point last_{};
};

std::string format_duration(double seconds);

}  // namespace paralab
