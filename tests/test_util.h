// Helpers shared by the test suites: tolerance checks that report the worst element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace paralab::testing {

// A build under AddressSanitizer or ThreadSanitizer (scripts/sanitize.sh: GCC's macros, clang's
// __has_feature; clang 14 defines no __SANITIZE_ADDRESS__). What they look for, a bad access or a
// race between rank threads, shows in the first case that takes a code path, and their shadow
// memory makes every fresh allocation costly (page faults took half of a layer_split comparison's
// time under TSan). Sweeps that repeat one path at other sizes or counts run a subset there, named
// where they do; the full sweeps run in every other build.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PARALAB_TEST_SANITIZER_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PARALAB_TEST_SANITIZER_BUILD 1
#endif
#endif
#ifdef PARALAB_TEST_SANITIZER_BUILD
inline constexpr bool kSanitizerBuild = true;
#else
inline constexpr bool kSanitizerBuild = false;
#endif

// Checks |got - ref| <= atol + rtol * |ref| element-wise; on failure names the worst element
// (largest excess over its bound), its index and both values.
template <typename Got, typename Ref>
::testing::AssertionResult all_close(const Got& got, const Ref& ref, double atol, double rtol) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure()
           << "size " << got.size() << " != reference size " << ref.size();
  std::size_t worst = 0;
  double worst_excess = -1e300;
  bool ok = true;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]), r = static_cast<double>(ref[i]);
    const double excess = std::abs(g - r) - (atol + rtol * std::abs(r));
    if (!(excess <= 0)) ok = false;
    if (excess > worst_excess || std::isnan(excess)) {
      worst_excess = std::isnan(excess) ? 1e300 : excess;
      worst = i;
    }
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "worst element " << worst << ": got " << static_cast<double>(got[worst])
         << ", reference " << static_cast<double>(ref[worst]) << " (atol " << atol << ", rtol "
         << rtol << ")";
}

// A device that passes everything to another: the base of test devices that watch or alter a
// few calls (event order, capture rules) and leave the rest to a real backend.
class ForwardingDevice : public Device {
 public:
  explicit ForwardingDevice(Device& inner) : inner_(inner) {}
  DeviceKind kind() const override { return inner_.kind(); }
  int ordinal() const override { return inner_.ordinal(); }
  std::string name() const override { return inner_.name(); }
  nlohmann::json describe() const override { return inner_.describe(); }
  int memory_domain() const override { return inner_.memory_domain(); }
  void* allocate(std::size_t bytes) override { return inner_.allocate(bytes); }
  void deallocate(void* p) noexcept override { inner_.deallocate(p); }
  void copy_from_host(void* d, const void* s, std::size_t n) override {
    inner_.copy_from_host(d, s, n);
  }
  void copy_to_host(void* d, const void* s, std::size_t n) override {
    inner_.copy_to_host(d, s, n);
  }
  void copy_on_device(void* d, const void* s, std::size_t n) override {
    inner_.copy_on_device(d, s, n);
  }
  void fill_zero(void* d, std::size_t n) override { inner_.fill_zero(d, n); }
  void copy_2d(void* d, std::size_t dp, const void* s, std::size_t sp, std::size_t w,
               std::size_t rows) override {
    inner_.copy_2d(d, dp, s, sp, w, rows);
  }
  void synchronize() override { inner_.synchronize(); }
  bool queues_work() const override { return inner_.queues_work(); }
  void bind_thread() override { inner_.bind_thread(); }
  Ops& ops() override { return inner_.ops(); }

 private:
  Device& inner_;
};

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

inline std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Sets or unsets an environment variable for one test and restores the old value afterwards.
class EnvGuard {
 public:
  explicit EnvGuard(const char* name) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;
  ~EnvGuard() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  void set(const std::string& value) { ASSERT_EQ(::setenv(name_, value.c_str(), 1), 0); }
  void unset() { ASSERT_EQ(::unsetenv(name_), 0); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace paralab::testing
