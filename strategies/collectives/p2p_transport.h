// A Transport over a collective library's stream-ordered point-to-point (NCCL's ncclSend and
// ncclRecv between GPUs of different processes and nodes), so that naive, ring and tree run
// unchanged there.
//
// The Transport's isend() never blocks, but an NCCL send completes only with its matching
// receive: a ring whose every rank queued "send to the next" before "receive from the previous"
// would wait on itself. So isend() only notes the send; each recv() (or recv_reduce()) issues
// the oldest noted send together with that receive in one group, as nccl-tests' and llm.c's
// ring steps pair them, and wait() or barrier() issues every noted send in one group (the
// reasons are at group() in p2p_transport.cpp). A collective's step (Transport::step: naive's
// and the ring's) is one group of all its sends and receives, however its messages are cut.
// Messages between a pair of ranks keep their order. The host never
// waits for the device: everything is queued on the rank's stream (recv_reduce adds from a
// scratch buffer on that stream after the receive).
//
// Unlike the in-process and MPI transports, a message of the wrong size cannot be detected here
// (NCCL moves the bytes it is told to): the collectives' own segment arithmetic guarantees sizes.
#pragma once

#include <functional>
#include <memory>

#include "core/device.h"
#include "strategies/collectives/transport.h"

namespace paralab {

// barrier: the group's host barrier (MPI's, under mpirun).
std::unique_ptr<Transport> make_point_to_point_transport(Device& device,
                                                         std::unique_ptr<NativePointToPoint> p2p,
                                                         std::function<void()> barrier);

}  // namespace paralab
