// libFuzzer target: the descriptor parser with --set overrides (experiments/descriptor.cpp).
// Input: the descriptor's text, then optionally a line "\n--set\n" followed by one assignment
// per line. Any input must end in a Descriptor or a paralab::Error, and every message must be
// one line of at most 320 characters (bench_runner prints it as it is).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "experiments/descriptor.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::size_t mark = input.find("\n--set\n");
  const std::string text = input.substr(0, mark);
  std::vector<std::string> sets;
  if (mark != std::string::npos) {
    std::size_t pos = mark + 7;
    while (pos <= input.size() && sets.size() < 8) {
      const std::size_t nl = input.find('\n', pos);
      sets.push_back(input.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
      if (nl == std::string::npos) break;
      pos = nl + 1;
    }
  }
  try {
    const paralab::Descriptor d =
        paralab::parse_descriptor_text(text, "fuzz.json", sets, std::nullopt);
    if (d.runs.empty() || d.runs.size() > 10000) __builtin_trap();
    (void)d.resolved.dump();  // what the results file will hold
  } catch (const paralab::Error& e) {
    const std::string m = e.what();
    if (m.find('\n') != std::string::npos || m.size() > 320) __builtin_trap();
  }
  return 0;
}
