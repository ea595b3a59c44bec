// libFuzzer target: the Fashion-MNIST IDX reader (gzip or plain, header checks, exact sizes).
// Input: a 4-byte little-endian length n, then n bytes of the images file and the rest as the
// labels file. Any input must end in a Dataset or a paralab::Error: never a crash, a leak, a
// hang or an allocation beyond what the bytes can inflate to.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "core/error.h"
#include "core/fashion_mnist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t n = 0;
  std::memcpy(&n, data, 4);
  const std::span<const uint8_t> rest(data + 4, size - 4);
  const std::size_t split = n % (rest.size() + 1);
  try {
    const paralab::Dataset d =
        paralab::read_idx_pair_from_memory(rest.first(split), rest.subspan(split), 2, 28);
    if (d.count < 1 || d.count > 2 || d.images.size() != static_cast<std::size_t>(d.count) * 784)
      __builtin_trap();  // a Dataset that breaks its own contract
  } catch (const paralab::Error&) {
  }
  return 0;
}
