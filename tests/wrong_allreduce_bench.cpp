// allreduce_bench with one more allreduce registered, "wrong", which is wrong on purpose: a
// correct ring allreduce after which rank 0 adds 1 to its first element. The ctest around it
// (tests/CMakeLists.txt) asserts that the benchmark notices before timing, reports it with
// SkipWithError and exits non-zero.
#include <cstdio>
#include <exception>

#include "experiments/allreduce_bench.h"

namespace {

class Wrong final : public paralab::Allreduce {
 public:
  std::string name() const override { return "wrong"; }
  void run(paralab::Transport& t, paralab::Tensor& buf) override {
    ring_->run(t, buf);
    if (t.rank() != 0 || buf.numel() == 0) return;
    std::vector<float> v = buf.to_host_f32();
    v[0] += 1.0f;
    buf.copy_from_host(v);
  }

 private:
  std::unique_ptr<paralab::Allreduce> ring_ = paralab::make_allreduce("ring", {});
};

}  // namespace

int main(int argc, char** argv) {
  try {
    return paralab::allreduce_bench_main(argc, argv,
                                         {{"wrong", [] { return std::make_unique<Wrong>(); }}});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wrong_allreduce_bench: %s\n", e.what());
    return 1;
  }
}
