// Transport: point-to-point messages between the ranks of a device group (SPMD: the same code
// runs once per rank, on a host thread bound to that rank's device).
//
// Every collective (naive, ring, tree, allgather, reduce-scatter) is written once over this
// interface. The in-process implementation (LocalFabric) hands buffers between threads; a
// multi-process one (MPI, NCCL point-to-point) can replace it without touching the algorithms.
//
// Semantics, as MPI's: messages between a pair of ranks are delivered in the order they were
// sent; isend() does not block, and its buffer must not change until wait() returns; recv()
// blocks until the matching message has arrived and been copied (or added) into its buffer.
// "Copied" is in device order: on devices that queue work (CUDA) the copy is queued after the
// sender's work that produced the buffer and before the receiver's next work, through events
// (Device::record / wait), and wait() makes the sender's later work follow the copy; the host
// itself never waits for a device here.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"

namespace paralab {

class NativePointToPoint;

class Transport {
 public:
  // An in-flight send; each transport keeps its own state in a derived type.
  struct Request {
    virtual ~Request() = default;
  };
  using Handle = std::shared_ptr<Request>;

  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual Handle isend(int peer, const Tensor& buf) = 0;
  virtual void wait(const Handle& handle) = 0;
  // buf = message
  virtual void recv(int peer, Tensor& buf) = 0;
  // recv(), with every send isend() noted before it on its way too. A pipeline stage calls it:
  // after two forwards it has two activations to send and then waits for a gradient that its
  // peer computes only once it has both. Transports whose isend() is already under way (in one
  // process, MPI) receive as recv() does; the point-to-point one, which holds sends back to issue
  // each with a receive (p2p_transport.h), issues them all with this one.
  virtual void recv_after_sends(int peer, Tensor& buf) { recv(peer, buf); }
  // buf += message (element-wise float32 sum, on this rank's device)
  virtual void recv_reduce(int peer, Tensor& buf) = 0;
  virtual void barrier() = 0;

  // One step of a collective that every rank of the group takes together: the buffers this rank
  // sends in it (its peers read them during the step) and its receives, in order (a copy, or an
  // add into buf; several adds into one buffer add in their order). Every rank calls step() for
  // every step of the collective, in the same order, with empty lists where it has nothing to do
  // in that step, so that a transport may move the whole step at once: LocalFabric over virtual
  // devices of one GPU queues all ranks' moves of a step as one kernel (moves_steps_whole()).
  // No receive of a step may write what another send or receive of the step reads or writes.
  // The buffers' memory must stay the caller's until its device's later work (a transport that
  // queues the moves on the device keeps no reference to them once step() returns, and the
  // device may reuse a freed buffer as soon as its own queue allows).
  // The default posts the sends (isend), receives in order, then waits for the sends: the same
  // messages as sending and receiving one by one.
  struct StepSend {
    int peer;
    Tensor buf;
  };
  struct StepReceive {
    int peer;
    Tensor buf;
    bool reduce;
  };
  virtual void step(std::span<const StepSend> sends, std::span<const StepReceive> receives);
  // Whether step() moves a whole step of all ranks at once (and then needs every rank in every
  // step); algorithms that pipeline messages across steps (tree) take lock-step steps instead.
  virtual bool moves_steps_whole() const { return false; }
  // A collective's steps as one run: between begin_steps() and end_steps() a rank calls only
  // step() (it queues no other work on its device), and every rank calls both. A transport that
  // moves whole steps may then move the run's steps together at end_steps() (LocalFabric over
  // virtual devices of one GPU: one kernel for the whole collective, the steps in order); until
  // end_steps() returns, the run's buffers may not have moved yet. Runs nest: the outermost
  // counts. drop_steps() forgets an unfinished run on this rank (a collective that fails
  // half-way). Use StepRun. The default moves each step in step() and ignores the three.
  virtual void begin_steps() {}
  virtual void end_steps() {}
  virtual void drop_steps() noexcept {}
  // The collective library's communicator this transport moves messages over (NCCL's, between
  // GPUs of different processes), for the library's own collectives ("nccl") over the same
  // ranks; null where messages go through ParaLab's own code (in one process, MPI).
  virtual NativePointToPoint* native() { return nullptr; }

  void send(int peer, const Tensor& buf) { wait(isend(peer, buf)); }

  // Bytes this rank has sent since the last reset (what the results call bytes sent per device).
  int64_t bytes_sent() const { return bytes_sent_; }
  void reset_bytes_sent() { bytes_sent_ = 0; }

  // Where a rank's communication time goes, from marks in its device's queue (Device::mark)
  // around each receive: waiting, from the receive's call until its data can move (the peer has
  // not sent yet, or, on devices that queue work, the peer's work that produces the data has not
  // finished), and moving, the copy or add itself. Sums over the receives since the last reset;
  // read them once the device has finished that work (after a synchronize). Transports that
  // cannot tell the two apart (MPI, NCCL) count no receives.
  struct ReceiveTimes {
    double wait_ms = 0, move_ms = 0;
    int64_t receives = 0;
  };
  void set_receive_timing(bool on) {
    receive_timing_ = on;
    receive_marks_.clear();
  }
  void reset_receive_times() { receive_marks_.clear(); }
  ReceiveTimes receive_times(Device& device) const;
  // The receives' marks themselves: a captured step keeps its capture's (every launch records
  // them again) and gives them back at each launch, since eager collectives between launches (an
  // evaluation's, a step of another batch) replace them (StepGraph).
  using ReceiveMarks = std::vector<std::array<TimeMark, 3>>;
  const ReceiveMarks& receive_marks() const { return receive_marks_; }
  void set_receive_marks(ReceiveMarks marks) { receive_marks_ = std::move(marks); }

 protected:
  // An Error unless `peer` is another rank of the group.
  void check_peer(int peer) const;
  // A buffer of n floats on `device` for a message to land in before it is added (the MPI and
  // NCCL transports' recv_reduce), grown as needed and reused.
  Tensor scratch(Device& device, int64_t n);
  // A receive's marks, kept while receive timing is on: before it waits, when its data can move,
  // after the data moved.
  bool receive_timing() const { return receive_timing_; }
  void note_receive(const TimeMark& called, const TimeMark& can_move, const TimeMark& moved) {
    receive_marks_.push_back({called, can_move, moved});
  }

  int64_t bytes_sent_ = 0;

 private:
  Tensor scratch_;
  std::vector<Tensor> retired_scratch_;  // scratch_'s earlier, smaller buffers (scratch())
  bool receive_timing_ = false;
  ReceiveMarks receive_marks_;
};

// A collective's steps as one run (Transport::begin_steps): begun here, ended by end(), dropped
// if the scope is left without end() (an exception).
class StepRun {
 public:
  explicit StepRun(Transport& t) : t_(t) { t_.begin_steps(); }
  ~StepRun() {
    if (!ended_) t_.drop_steps();
  }
  StepRun(const StepRun&) = delete;
  StepRun& operator=(const StepRun&) = delete;
  void end() {
    ended_ = true;
    t_.end_steps();
  }

 private:
  Transport& t_;
  bool ended_ = false;
};

// The shared state of an in-process group: one mailbox per ordered pair of ranks. Each rank gets
// its Transport from endpoint(rank). The receiving rank moves the data itself, reading the
// sender's buffer through its own device (CPU: a memcpy or an add loop over the peer's memory).
//
// Over devices of one memory domain (virtual devices of one GPU) the fabric may move each
// collective step as a whole (Transport::step): the ranks meet, and the last to arrive queues
// every rank's moves of the step at once (Device::group_mover: one kernel on the GPU), after each
// rank's work so far; each rank's later work waits for it. Within a run of steps
// (Transport::begin_steps, which every collective of collectives.h takes), it goes further: the
// steps' moves are gathered and queued together when the run ends, as one unit (one kernel for
// the whole collective, each step's moves after the previous step's). That is the single-GPU
// form of a collective library's one kernel per collective: no host work and no launch per rank,
// message or step. StepMoves says when:
//   Auto: whole collectives where the devices have a group mover (CUDA devices of one GPU),
//         unless PARALAB_STEP_MOVES says otherwise.
//   PerRank: never: every receive is the receiver's own copy or add (the CPU's way).
//   Whole: whole collectives always (devices without a group mover: each move on the last
//          rank's device, in order; how the tests run the protocol without a GPU).
//   WholeSteps: as Whole, but each step queued on its own (one unit per step).
enum class StepMoves { Auto, PerRank, Whole, WholeSteps };

// PARALAB_STEP_MOVES: unset or "auto" -> Auto, "per_rank", "whole", "whole_steps"; any other
// value is an Error naming the variable.
StepMoves step_moves_from_env();

class LocalFabric {
 public:
  explicit LocalFabric(std::vector<Device*> devices, StepMoves moves = step_moves_from_env());
  ~LocalFabric();
  LocalFabric(const LocalFabric&) = delete;
  LocalFabric& operator=(const LocalFabric&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  Transport& endpoint(int rank);
  // Wakes every rank blocked in the fabric with an Error: a rank that failed calls this so that
  // its peers do not wait forever for messages that will never come.
  void abort();
  // After abort(), once no thread of any rank is inside the fabric any more: forgets every
  // message, meeting, barrier arrival and run of steps left half-way, and lets the ranks talk
  // again through the same endpoints (each one's counts of bytes and receives reset). So a
  // group whose step was stopped part-way on purpose (a capture that broke, CaptureBroken) can
  // run on.
  void reopen();
  // Whether collective steps move whole (see StepMoves), whether whole collectives do, and
  // how, for the results.
  bool moves_steps_whole() const;
  bool moves_collectives_whole() const;
  std::string step_moves_description() const;

 private:
  struct Impl;
  std::vector<Device*> devices_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace paralab
