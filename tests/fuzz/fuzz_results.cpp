// libFuzzer target: the results reader behind --resume (experiments/results.cpp,
// resumable_runs) on arbitrary text, against a fixed descriptor. Any input must end in a list of
// runs or a paralab::Error with a one-line message: never a crash, a deep recursion or a leak.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "experiments/descriptor.h"
#include "experiments/results.h"

namespace {
// tests/fuzz/corpus/results/ holds results files of this descriptor (bench_runner run on
// tests/fuzz/results-descriptor.json), so the fuzzer starts from inputs that resume.
const char* const kDescriptor =
#include "tests/fuzz/results-descriptor.inc"
    ;

const paralab::Descriptor& descriptor() {
  static const paralab::Descriptor d =
      paralab::parse_descriptor_text(kDescriptor, "fuzz.json", {}, std::nullopt);
  return d;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    // The data directory and the machine the corpus's files record (tests/fuzz/corpus/results/),
    // so that its inputs get past those checks to the runs.
    static const nlohmann::json here = {{"cpu_model", "Intel(R) Xeon(R) Processor"},
                                        {"cpu_cores", 2}};
    for (const auto& run : paralab::resumable_runs(text, "fuzz.json", descriptor(),
                                                   "/usr/share/datasets/fashion-mnist", here)) {
      // What bench_runner reads of a kept run is there, with its type.
      if (!run.is_object() || !run["label"].is_string() || !run["config"]["devices"].is_number() ||
          !run["epochs"].is_array() || !run["timing"]["timed_iterations"].is_number() ||
          !run.contains("kept_from"))
        __builtin_trap();
    }
  } catch (const paralab::Error& e) {
    const std::string m = e.what();
    if (m.find('\n') != std::string::npos || m.size() > 320) __builtin_trap();
  }
  return 0;
}
