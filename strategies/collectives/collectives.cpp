#include "strategies/collectives/collectives.h"

#include <algorithm>
#include <functional>
#include <map>

#include "core/error.h"

namespace paralab {

std::vector<int64_t> equal_segments(int64_t n, int k) {
  PARALAB_REQUIRE(k >= 1 && n >= 0,
                  "segments: bad split of " + std::to_string(n) + " into " + std::to_string(k));
  std::vector<int64_t> b(static_cast<std::size_t>(k) + 1, 0);
  for (int i = 0; i < k; ++i) b[i + 1] = b[i] + n / k + (i < n % k ? 1 : 0);
  return b;
}

std::vector<int64_t> segments_from_counts(std::span<const int64_t> counts) {
  std::vector<int64_t> b{0};
  for (int64_t c : counts) {
    PARALAB_REQUIRE(c >= 0, "segments: negative count");
    b.push_back(b.back() + c);
  }
  return b;
}

namespace {

int mod(int a, int k) { return ((a % k) + k) % k; }

// Elements per piece for a chunk size in bytes (at least 1).
int64_t piece_elems(int64_t chunk_bytes) {
  return chunk_bytes > 0 ? std::max<int64_t>(1, chunk_bytes / 4) : INT64_MAX;
}

// Pieces of at most `piece` elements covering n elements; at least one (an empty message keeps
// the peers in step). Piece i starts at i * piece (i > 0 only when piece < n: no overflow).
int64_t pieces(int64_t n, int64_t piece) { return n == 0 ? 1 : (n - 1) / piece + 1; }

Tensor slice(const Tensor& buf, int64_t begin, int64_t end) {
  return buf.view(begin, {end - begin});
}

void check_bounds(const Transport& t, const Tensor& buf, std::span<const int64_t> bounds) {
  PARALAB_REQUIRE(static_cast<int>(bounds.size()) == t.size() + 1 && bounds.front() == 0 &&
                      bounds.back() == buf.numel(),
                  "collective: " + std::to_string(bounds.size()) + " segment bounds for " +
                      std::to_string(t.size()) + " ranks and " + std::to_string(buf.numel()) +
                      " elements");
}

// One ring step: send segment `send_seg` to the next rank while receiving segment `recv_seg`
// from the previous one, both cut into the same pieces.
void ring_step(Transport& t, Tensor& buf, std::span<const int64_t> b, int send_seg, int recv_seg,
               bool reduce, int64_t piece) {
  const int k = t.size(), r = t.rank();
  const int next = mod(r + 1, k), prev = mod(r - 1, k);
  const int64_t s0 = b[send_seg], s1 = b[send_seg + 1], r0 = b[recv_seg], r1 = b[recv_seg + 1];
  // Both sides cut a segment the same way, so piece i of what is sent matches piece i of what
  // the neighbour expects; empty segments still exchange one empty message to stay in step.
  const int64_t send_pieces = pieces(s1 - s0, piece), recv_pieces = pieces(r1 - r0, piece);
  std::vector<Transport::StepSend> sends;
  std::vector<Transport::StepReceive> receives;
  for (int64_t i = 0; i < send_pieces; ++i) {
    const int64_t a = s0 + i * piece, e = a + std::min(piece, s1 - a);
    sends.push_back({next, slice(buf, a, e)});
  }
  for (int64_t i = 0; i < recv_pieces; ++i) {
    const int64_t a = r0 + i * piece, e = a + std::min(piece, r1 - a);
    receives.push_back({prev, slice(buf, a, e), reduce});
  }
  t.step(sends, receives);
}

void reduce_scatter_impl(Transport& t, Tensor& buf, std::span<const int64_t> b, int64_t piece) {
  const int k = t.size(), r = t.rank();
  StepRun run(t);
  // Step s: send segment (r - s - 1), receive-and-add segment (r - s - 2); after k-1 steps
  // rank r holds the full sum of segment r.
  for (int s = 0; s < k - 1; ++s)
    ring_step(t, buf, b, mod(r - s - 1, k), mod(r - s - 2, k), true, piece);
  run.end();
}

void allgather_impl(Transport& t, Tensor& buf, std::span<const int64_t> b, int64_t piece) {
  const int k = t.size(), r = t.rank();
  StepRun run(t);
  // Step s: send segment (r - s), receive (overwrite) segment (r - s - 1).
  for (int s = 0; s < k - 1; ++s)
    ring_step(t, buf, b, mod(r - s, k), mod(r - s - 1, k), false, piece);
  run.end();
}

class Naive final : public Allreduce {
 public:
  std::string name() const override { return "naive"; }
  // The book's algorithm: rank 0 adds every peer's buffer into its own, in rank order (k-1
  // steps, one peer each), then sends the sum back to every peer (one step).
  void run(Transport& t, Tensor& buf) override {
    const int k = t.size(), r = t.rank();
    if (k == 1) return;
    using Send = Transport::StepSend;
    using Receive = Transport::StepReceive;
    StepRun run(t);
    for (int p = 1; p < k; ++p) {
      if (r == 0)
        t.step({}, std::vector<Receive>{{p, buf, true}});
      else if (r == p)
        t.step(std::vector<Send>{{0, buf}}, {});
      else
        t.step({}, {});
    }
    if (r == 0) {
      std::vector<Send> sends;
      for (int p = 1; p < k; ++p) sends.push_back({p, buf});
      t.step(sends, {});
    } else {
      t.step({}, std::vector<Receive>{{0, buf, false}});
    }
    run.end();
  }
};

class Ring final : public Allreduce {
 public:
  explicit Ring(const AllreduceOptions& o) : piece_(piece_elems(o.chunk_bytes)) {}
  std::string name() const override { return "ring"; }
  void run(Transport& t, Tensor& buf) override {
    if (t.size() == 1) return;
    // Both halves as one run of steps: where the transport moves collectives whole, the ring is
    // one unit.
    const auto b = equal_segments(buf.numel(), t.size());
    StepRun run(t);
    reduce_scatter_impl(t, buf, b, piece_);
    allgather_impl(t, buf, b, piece_);
    run.end();
  }

 private:
  int64_t piece_;
};

class Tree final : public Allreduce {
 public:
  explicit Tree(const AllreduceOptions& o) : piece_(piece_elems(o.chunk_bytes)) {}
  std::string name() const override { return "tree"; }
  // Binary tree rooted at rank 0 (children of r: 2r+1, 2r+2). Reduce: for each chunk, add the
  // children's chunk, pass it up. Broadcast: for each chunk, take it from the parent, pass it
  // down. Sends are not waited for at once, so chunk c+1 moves up one level while chunk c moves
  // up the next: the pipeline.
  void run(Transport& t, Tensor& buf) override {
    const int k = t.size();
    if (k == 1) return;
    if (t.moves_steps_whole()) {
      run_in_steps(t, buf);
      return;
    }
    const int r = t.rank();
    const int parent = (r - 1) / 2;
    const std::vector<int> children = children_of(r, k);
    const int64_t chunks = pieces(buf.numel(), piece_);
    auto chunk = [&](int64_t c) { return chunk_of(buf, c); };
    std::vector<Transport::Handle> up(static_cast<std::size_t>(chunks));
    for (int64_t c = 0; c < chunks; ++c) {
      Tensor part = chunk(c);
      for (int child : children) t.recv_reduce(child, part);
      if (r != 0) up[c] = t.isend(parent, part);
    }
    std::vector<Transport::Handle> down;
    for (int64_t c = 0; c < chunks; ++c) {
      Tensor part = chunk(c);
      if (r != 0) {
        t.wait(up[c]);  // our partial sum must be read before the total overwrites it
        t.recv(parent, part);
      }
      for (int child : children) down.push_back(t.isend(child, part));
    }
    for (auto& h : down) t.wait(h);
  }

 private:
  static int depth(int r) {
    int d = 0;
    for (int x = r + 1; x > 1; x /= 2) ++d;
    return d;
  }
  static std::vector<int> children_of(int r, int k) {
    std::vector<int> children;
    for (int c : {2 * r + 1, 2 * r + 2})
      if (c < k) children.push_back(c);
    return children;
  }
  // Chunk c of buf (c > 0 only when piece_ < its size: no overflow).
  Tensor chunk_of(const Tensor& buf, int64_t c) const {
    const int64_t n = buf.numel(), a = c * piece_;
    return slice(buf, a, a + std::min(piece_, n - a));
  }

  // The same tree and the same sums, in steps every rank takes together (a transport that moves
  // whole steps): the pipeline becomes a schedule. Up, in step s the children at depth d send
  // chunk s - (D - d) to their parents, which add it (both children, in order); down, in step s
  // the parents at depth d - 1 send chunk s - (d - 1) to their children. D: the deepest depth.
  // A rank's chunk in one role is never the chunk it has in the other role of the same step.
  void run_in_steps(Transport& t, Tensor& buf) {
    const int k = t.size(), r = t.rank();
    const int deepest = depth(k - 1), mine = depth(r), parent = (r - 1) / 2;
    const std::vector<int> children = children_of(r, k);
    const int64_t chunks = pieces(buf.numel(), piece_);
    auto chunk = [&](int64_t c) { return chunk_of(buf, c); };
    const int64_t steps = chunks + deepest - 1;
    StepRun run(t);
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<Transport::StepSend> sends;
      std::vector<Transport::StepReceive> receives;
      const int64_t up = s - (deepest - mine);  // the chunk this rank sends its parent
      if (r != 0 && up >= 0 && up < chunks) sends.push_back({parent, chunk(up)});
      const int64_t in = s - (deepest - mine - 1);  // the chunk its children send it
      if (in >= 0 && in < chunks)
        for (int child : children) receives.push_back({child, chunk(in), true});
      t.step(sends, receives);
    }
    for (int64_t s = 0; s < steps; ++s) {
      std::vector<Transport::StepSend> sends;
      std::vector<Transport::StepReceive> receives;
      const int64_t from_parent = s - (mine - 1);
      if (r != 0 && from_parent >= 0 && from_parent < chunks)
        receives.push_back({parent, chunk(from_parent), false});
      const int64_t to_children = s - mine;
      if (to_children >= 0 && to_children < chunks)
        for (int child : children) sends.push_back({child, chunk(to_children)});
      t.step(sends, receives);
    }
    run.end();
  }

  int64_t piece_;
};

// The industrial reference: NCCL's own allreduce. It does not go through ParaLab's messages
// (NCCL moves the data itself), so bytes_sent does not count its traffic. In one process it is
// one communicator over the group's GPUs (ncclCommInitAll at prepare()); under mpirun, where each
// process holds one rank, it is the communicator the transport already moves messages over
// (Transport::native(), made with ncclCommInitRank), so prepare() sees one device and makes none.
class Nccl final : public Allreduce {
 public:
  std::string name() const override { return "nccl"; }
  void prepare(const std::vector<Device*>& devices) override {
    if (devices.size() != 1) {
      comm_ = make_native_collectives("nccl", devices);
      return;
    }
    // One rank here: the sum is the buffer itself, or the other ranks are in other processes.
    check_native_collectives("nccl", devices);
    prepared_ = true;
  }
  void run(Transport& t, Tensor& buf) override {
    if (NativePointToPoint* native = t.native()) {
      native->allreduce_sum(buf);
      return;
    }
    PARALAB_REQUIRE(comm_ != nullptr || (prepared_ && t.size() == 1),
                    std::string("nccl: prepare() was not called with the device group, or the "
                                "transport between processes has no NCCL communicator"));
    if (comm_) comm_->allreduce_sum(t.rank(), buf);
  }

 private:
  std::unique_ptr<NativeCollectives> comm_;
  bool prepared_ = false;
};

using Factory = std::function<std::unique_ptr<Allreduce>(const AllreduceOptions&)>;

const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> r = {
      {"naive", [](const AllreduceOptions&) { return std::make_unique<Naive>(); }},
      {"nccl", [](const AllreduceOptions&) { return std::make_unique<Nccl>(); }},
      {"ring", [](const AllreduceOptions& o) { return std::make_unique<Ring>(o); }},
      {"tree", [](const AllreduceOptions& o) { return std::make_unique<Tree>(o); }},
  };
  return r;
}

}  // namespace

void reduce_scatter_ring(Transport& t, Tensor& buf, std::span<const int64_t> bounds,
                         int64_t chunk_bytes) {
  check_bounds(t, buf, bounds);
  if (t.size() > 1) reduce_scatter_impl(t, buf, bounds, piece_elems(chunk_bytes));
}

void allgather_ring(Transport& t, Tensor& buf, std::span<const int64_t> bounds,
                    int64_t chunk_bytes) {
  check_bounds(t, buf, bounds);
  if (t.size() > 1) allgather_impl(t, buf, bounds, piece_elems(chunk_bytes));
}

int64_t auto_chunk_bytes(const std::vector<Device*>& devices) {
  if (devices.size() < 2) return kDefaultChunkBytes;
  const int domain = devices.front()->memory_domain();
  for (const Device* d : devices)
    if (d->memory_domain() < 0 || d->memory_domain() != domain) return kDefaultChunkBytes;
  return 0;
}

std::vector<std::string> known_allreduces() {
  std::vector<std::string> names;
  for (const auto& [name, f] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Allreduce> make_allreduce(const std::string& name,
                                          const AllreduceOptions& options) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : known_allreduces()) known += (known.empty() ? "" : ", ") + n;
    throw Error("unknown allreduce '" + name + "' (known: " + known + ")");
  }
  return it->second(options);
}

}  // namespace paralab
