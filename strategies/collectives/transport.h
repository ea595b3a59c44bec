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

#include <cstdint>
#include <memory>
#include <vector>

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
  // buf += message (element-wise float32 sum, on this rank's device)
  virtual void recv_reduce(int peer, Tensor& buf) = 0;
  virtual void barrier() = 0;
  // The collective library's communicator this transport moves messages over (NCCL's, between
  // GPUs of different processes), for the library's own collectives ("nccl") over the same
  // ranks; null where messages go through ParaLab's own code (in one process, MPI).
  virtual NativePointToPoint* native() { return nullptr; }

  void send(int peer, const Tensor& buf) { wait(isend(peer, buf)); }

  // Bytes this rank has sent since the last reset (what the results call bytes sent per device).
  int64_t bytes_sent() const { return bytes_sent_; }
  void reset_bytes_sent() { bytes_sent_ = 0; }

 protected:
  // An Error unless `peer` is another rank of the group.
  void check_peer(int peer) const;
  // A buffer of n floats on `device` for a message to land in before it is added (the MPI and
  // NCCL transports' recv_reduce), grown as needed and reused.
  Tensor scratch(Device& device, int64_t n);

  int64_t bytes_sent_ = 0;

 private:
  Tensor scratch_;
};

// The shared state of an in-process group: one mailbox per ordered pair of ranks. Each rank gets
// its Transport from endpoint(rank). The receiving rank moves the data itself, reading the
// sender's buffer through its own device (CPU: a memcpy or an add loop over the peer's memory).
class LocalFabric {
 public:
  explicit LocalFabric(std::vector<Device*> devices);
  ~LocalFabric();
  LocalFabric(const LocalFabric&) = delete;
  LocalFabric& operator=(const LocalFabric&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  Transport& endpoint(int rank);
  // Wakes every rank blocked in the fabric with an Error: a rank that failed calls this so that
  // its peers do not wait forever for messages that will never come.
  void abort();

 private:
  struct Impl;
  std::vector<Device*> devices_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace paralab
