// Collectives over a Transport, written once for every backend (SPMD: each rank calls the same
// function with its own buffer; all ranks of the group must call it, in the same order).
//
// Cost model (p ranks, n bytes; alpha latency, beta s/byte):
//   naive (the book: everything to rank 0, add, broadcast)  2(p-1)alpha + 2(p-1)n beta at rank 0
//   ring  (reduce-scatter, then all-gather)                 2(p-1)alpha + 2((p-1)/p)n beta
//   tree  (binary-tree reduce, then broadcast, pipelined    ~2 log2(p) alpha + 2n beta
//          over chunks)
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "strategies/collectives/transport.h"

namespace paralab {

// Boundaries of k near-equal segments of n elements: segment i is [b[i], b[i+1]); the first
// n % k segments hold one element more.
std::vector<int64_t> equal_segments(int64_t n, int k);
// Boundaries from explicit segment sizes (uneven splits such as 7/7/6 channels).
std::vector<int64_t> segments_from_counts(std::span<const int64_t> counts);

// The pieces messages are cut into by default (AllreduceOptions::chunk_bytes, auto_chunk_bytes).
inline constexpr int64_t kDefaultChunkBytes = int64_t{1} << 18;

// Ring reduce-scatter: afterwards rank r's segment r of buf holds the sum over ranks of that
// segment (other segments hold partial sums). bounds: size()+1 boundaries over buf. Each
// segment travels in pieces of at most chunk_bytes (0: whole); the sums do not depend on it.
void reduce_scatter_ring(Transport& t, Tensor& buf, std::span<const int64_t> bounds,
                         int64_t chunk_bytes = kDefaultChunkBytes);
// Ring all-gather: rank r contributes segment r of buf; afterwards every rank holds all segments.
void allgather_ring(Transport& t, Tensor& buf, std::span<const int64_t> bounds,
                    int64_t chunk_bytes = kDefaultChunkBytes);

// buf = sum over ranks of buf; every rank ends with bit-identical contents.
class Allreduce {
 public:
  virtual ~Allreduce() = default;
  virtual std::string name() const = 0;
  // Called once with the group before the first run(), from one thread: for algorithms that
  // need group-wide state (nccl's communicators; it throws Unavailable where it cannot run).
  virtual void prepare(const std::vector<Device*>& devices) { (void)devices; }
  virtual void run(Transport& t, Tensor& buf) = 0;
};

struct AllreduceOptions {
  // Messages are cut into pieces of at most this many bytes so that consecutive hops overlap
  // (ring: pieces of each segment; tree: the pipeline's chunks). 0 = no cutting.
  int64_t chunk_bytes = kDefaultChunkBytes;
};

// What chunk size "auto" means for a group: 0 (whole messages) when every device is in one and
// the same memory domain (Device::memory_domain: virtual devices of one GPU),
// kDefaultChunkBytes otherwise. On one GPU a
// message is one copy or one add kernel over shared memory: cutting it pipelines nothing (there
// is no link to keep busy) and only multiplies the host's launches per message (on an H200,
// 64 pieces of 256 KiB made a 16 MiB ring on 2 virtual devices 120x a memcpy of the bytes:
// results/reference/h200-2026-11-30/FINDINGS.md). Between CPU cores and between GPUs joined by
// links, pieces let consecutive hops overlap.
int64_t auto_chunk_bytes(const std::vector<Device*>& devices);

// "naive", "ring", "tree", "nccl" (CUDA devices on distinct GPUs only); an unknown name is an Error
// listing the known ones.
std::unique_ptr<Allreduce> make_allreduce(const std::string& name, const AllreduceOptions& options);
std::vector<std::string> known_allreduces();

}  // namespace paralab
