// Which cores a CPU rank under mpirun is pinned to (experiments/cpu_binding.h): distinct physical
// cores first, hyperthread siblings last, and no pinning where the ranks outnumber the cores.
#include <gtest/gtest.h>

#include "core/error.h"
#include "experiments/cpu_binding.h"

namespace paralab {
namespace {

// 2 sockets x 2 cores x 2 threads, numbered as Linux usually does: CPU c and c+4 are siblings.
std::vector<CpuInfo> two_sockets() {
  std::vector<CpuInfo> cpus;
  for (int c = 0; c < 8; ++c) cpus.push_back({c, (c % 4) / 2, c % 2});
  return cpus;
}

TEST(CpuBinding, DistinctPhysicalCoresBeforeSiblings) {
  EXPECT_EQ(pinning_order(two_sockets()), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Siblings numbered next to each other (0/1, 2/3, ...): the first of each core comes first.
  std::vector<CpuInfo> adjacent;
  for (int c = 0; c < 6; ++c) adjacent.push_back({c, 0, c / 2});
  EXPECT_EQ(pinning_order(adjacent), (std::vector<int>{0, 2, 4, 1, 3, 5}));
}

TEST(CpuBinding, EachRankGetsCoresOfItsOwn) {
  std::vector<CpuInfo> adjacent;
  for (int c = 0; c < 6; ++c) adjacent.push_back({c, 0, c / 2});
  EXPECT_EQ(cpus_for_rank(adjacent, 0, 3, 1), std::vector<int>{0});
  EXPECT_EQ(cpus_for_rank(adjacent, 1, 3, 1), std::vector<int>{2});
  EXPECT_EQ(cpus_for_rank(adjacent, 2, 3, 1), std::vector<int>{4});
  EXPECT_EQ(cpus_for_rank(two_sockets(), 1, 2, 2), (std::vector<int>{2, 3}));
}

TEST(CpuBinding, RanksThatOutnumberTheCoresAreNotPinned) {
  std::vector<CpuInfo> adjacent;
  for (int c = 0; c < 6; ++c) adjacent.push_back({c, 0, c / 2});
  EXPECT_TRUE(cpus_for_rank(adjacent, 0, 4, 1).empty()) << "4 ranks, 3 physical cores";
  EXPECT_TRUE(cpus_for_rank(two_sockets(), 0, 3, 2).empty()) << "3 ranks of 2 on 4 cores";
  EXPECT_THROW(cpus_for_rank(adjacent, 3, 3, 1), Error);
}

}  // namespace
}  // namespace paralab
