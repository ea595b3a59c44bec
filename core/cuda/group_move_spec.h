// A group's move (core/device.h: GroupMove, what the transport hands the mover) as the CUDA
// kernel's argument (group_moves.h: GroupMoveSpec), checked. Plain C++: the CUDA mover
// (group_mover.cpp) and the CPU emulation test of its kernel build the same arguments.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/cuda/group_moves.h"
#include "core/device.h"
#include "core/error.h"

namespace paralab::cuda {

// Every move of `moves`, in order; Error for a bad source count or phases out of order.
inline std::vector<GroupMoveSpec> group_move_specs(std::span<const GroupMove> moves) {
  std::vector<GroupMoveSpec> specs;
  specs.reserve(moves.size());
  for (const GroupMove& m : moves) {
    PARALAB_REQUIRE(
        m.sources >= 1 && m.sources <= GroupMove::kMaxSources && (m.reduce || m.sources == 1),
        std::string("group mover: a move with a bad source count"));
    PARALAB_REQUIRE(specs.empty() || m.phase >= specs.back().phase,
                    std::string("group mover: phases out of order"));
    specs.push_back({m.dst, m.src[0], m.sources > 1 ? m.src[1] : nullptr, m.reduce ? m.sources : 0,
                     m.floats, m.phase});
  }
  return specs;
}

}  // namespace paralab::cuda
