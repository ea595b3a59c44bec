#include "strategies/collectives/transport.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <mutex>
#include <string_view>

#include "core/device.h"
#include "core/error.h"
#include "core/ops.h"

namespace paralab {

void Transport::check_peer(int peer) const {
  PARALAB_REQUIRE(peer >= 0 && peer < size() && peer != rank(),
                  "transport: rank " + std::to_string(rank()) + " cannot talk to peer " +
                      std::to_string(peer) + " in a group of " + std::to_string(size()));
}

void Transport::step(std::span<const StepSend> sends, std::span<const StepReceive> receives) {
  std::vector<Handle> posted;
  posted.reserve(sends.size());
  for (const StepSend& s : sends) posted.push_back(isend(s.peer, s.buf));
  for (const StepReceive& r : receives) {
    Tensor buf = r.buf;
    r.reduce ? recv_reduce(r.peer, buf) : recv(r.peer, buf);
  }
  for (const Handle& h : posted) wait(h);
}

StepMoves step_moves_from_env() {
  const char* v = std::getenv("PARALAB_STEP_MOVES");
  if (!v || !*v || std::string_view(v) == "auto") return StepMoves::Auto;
  if (std::string_view(v) == "per_rank") return StepMoves::PerRank;
  if (std::string_view(v) == "whole") return StepMoves::Whole;
  if (std::string_view(v) == "whole_steps") return StepMoves::WholeSteps;
  throw Error("PARALAB_STEP_MOVES: '" + std::string(v) +
              "' is none of auto, per_rank, whole, whole_steps");
}

Transport::ReceiveTimes Transport::receive_times(Device& device) const {
  ReceiveTimes t;
  for (const auto& m : receive_marks_) {
    t.wait_ms += device.elapsed_ms(m[0], m[1]);
    t.move_ms += device.elapsed_ms(m[1], m[2]);
  }
  t.receives = static_cast<int64_t>(receive_marks_.size());
  return t;
}

Tensor Transport::scratch(Device& device, int64_t n) {
  if (!scratch_.defined() || scratch_.numel() < n) {
    // The buffer it replaces may still be read by queued work (a receive and its add, on a
    // device that queues work, perhaps on its communication stream, which the allocator does
    // not order against): kept for the transport's life, not handed back. Doubling bounds what
    // is kept by the size of the newest buffer.
    const int64_t had = scratch_.defined() ? scratch_.numel() : 0;
    if (had) retired_scratch_.push_back(std::move(scratch_));
    scratch_ = Tensor::empty(device, {std::max<int64_t>({n, 2 * had, 1})});
  }
  return scratch_.view(0, {n});
}

namespace {

// LocalFabric's send: the receiver reads `buf` directly.
struct LocalRequest final : Transport::Request {
  Tensor buf;                     // the sender's buffer (shares its storage)
  Event ready;                    // the sender's work that produced buf
  Event consumed;                 // the receiver's copy (or add) that reads buf
  std::atomic<bool> done{false};  // set by the receiver once it has queued that copy
  std::mutex* mu = nullptr;       // the mailbox's: sleepers wait on its cv
  std::condition_variable* cv = nullptr;
};

// Why spin first: a condition-variable wake-up costs tens of microseconds on a loaded VM,
// several times a 256 KiB copy, and every ring step has two hand-offs. Ranks spin this many
// polls (~20 us) before they sleep, so that a peer that is about to answer is not missed,
// while a peer that is still computing costs little CPU.
constexpr int kSpinPolls = 4000;

template <typename Ready>
bool spin_until(Ready ready) {
  for (int i = 0; i < kSpinPolls; ++i) {
    if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  return false;
}

}  // namespace

struct LocalFabric::Impl {
  // What a rank reached the rendezvous for: a step moved on its own, a step of a run (gathered,
  // moved at the run's end), or a run's end. Every rank must reach it for the same.
  enum class Meeting { Step, RunStep, RunEnd };
  // A rank's part of a whole step (Transport::step), left at the rendezvous.
  struct Arrival {
    Meeting meeting = Meeting::Step;
    std::vector<Transport::StepSend> sends;
    std::vector<Transport::StepReceive> receives;
    Event ready;  // null within a run after its first step (the rank queued nothing since)
    bool timed = false;
    bool first = false;  // the first step of a run
  };
  // A receive's move, paired with the send it takes; phase: its step's place in the run.
  struct Pending {
    int rank;
    Tensor dst;
    std::vector<Tensor> srcs;
    bool reduce;
    int phase = 0;
  };
  // A step's moves, or a run's in step order: each receive's, and as the mover takes them (a
  // step's pieces of one message merged, checked not to overlap within their step).
  struct Moves {
    std::vector<Pending> pending;
    std::vector<GroupMove> merged;
  };
  // The run of steps gathered so far (whole collectives): their moves and what they wait for.
  // Touched by the last rank to arrive at each meeting, under the rendezvous lock.
  struct Run {
    Moves moves;
    std::vector<Event> after;
    int steps = 0;
    bool timed = false;
  };
  struct Rendezvous {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<Arrival> slots;
    int arrived = 0;
    std::atomic<uint64_t> gen{0};  // steps moved so far (written under mu)
    GroupMover::Done done;         // the last step's
    std::string error;             // the last step's, if its moves could not be made
  };

  struct Mailbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::shared_ptr<LocalRequest>> queue;
    std::atomic<int> queued{0};  // queue.size(), readable without the lock (for spinning)
  };

  class Endpoint final : public Transport {
   public:
    Endpoint(Impl& fabric, int rank, Device& device)
        : fabric_(fabric), rank_(rank), device_(device) {}
    int rank() const override { return rank_; }
    int size() const override { return fabric_.size; }

    Handle isend(int peer, const Tensor& buf) override {
      check_peer(peer);
      // The peer's copy must start after the work that produced buf: an event it waits on
      // (CUDA; the host does not wait), nothing on the CPU, whose work is done when queued.
      auto req = std::make_shared<LocalRequest>();
      req->buf = buf;
      req->ready = device_.record();
      Mailbox& box = fabric_.box(rank_, peer);
      req->mu = &box.mu;
      req->cv = &box.cv;
      {
        std::lock_guard lock(box.mu);
        box.queue.push_back(req);
        box.queued.fetch_add(1, std::memory_order_release);
      }
      box.cv.notify_all();
      bytes_sent_ += static_cast<int64_t>(buf.bytes());
      return req;
    }

    void wait(const Handle& handle) override {
      PARALAB_REQUIRE(handle != nullptr, "transport: wait() on an empty request");
      auto* req = dynamic_cast<LocalRequest*>(handle.get());
      PARALAB_REQUIRE(req != nullptr, "transport: wait() on another transport's request");
      if (!spin_until([&] { return req->done.load(std::memory_order_acquire); })) {
        std::unique_lock lock(*req->mu);
        req->cv->wait(lock, [&] { return req->done || fabric_.aborted; });
        if (!req->done) fabric_.check_aborted(rank_);
      }
      // Whatever this rank queues next (e.g. overwriting buf) waits for the peer's copy.
      device_.wait(req->consumed);
    }

    bool moves_steps_whole() const override { return fabric_.whole; }

    void step(std::span<const StepSend> sends, std::span<const StepReceive> receives) override {
      if (!fabric_.whole) {
        Transport::step(sends, receives);
        return;
      }
      for (const StepSend& s : sends) check_peer(s.peer);
      for (const StepReceive& r : receives) check_peer(r.peer);
      const bool timed = receive_timing();
      int64_t moving = 0;  // receives that move data
      for (const StepReceive& r : receives) moving += r.buf.numel() ? 1 : 0;
      Arrival mine;
      mine.sends.assign(sends.begin(), sends.end());
      mine.receives.assign(receives.begin(), receives.end());
      mine.timed = timed;
      for (const StepSend& s : sends) bytes_sent_ += static_cast<int64_t>(s.buf.bytes());
      if (in_run_) {
        // Gathered; moved at the run's end. Its first step marks what the run waits for.
        mine.meeting = Meeting::RunStep;
        mine.first = run_.steps++ == 0;
        if (mine.first) {
          if (timed) run_.called = device_.mark();
          mine.ready = device_.record();
        }
        run_.receives += moving;
        meet(std::move(mine));
        return;
      }
      const TimeMark called = timed ? device_.mark() : TimeMark{};
      mine.ready = device_.record();  // every rank's work so far: what the step may read or write
      const GroupMover::Done done = meet(std::move(mine));
      device_.wait(done.done);
      note_moved(timed, moving, called, done);
    }

    // Runs nest (a ring's reduce-scatter and all-gather within its own run): the outermost
    // counts.
    void begin_steps() override {
      if (run_depth_++ > 0) return;
      in_run_ = fabric_.whole && fabric_.collectives;
      run_ = {};
    }

    void end_steps() override {
      if (run_depth_ == 0 || --run_depth_ > 0 || !in_run_) return;
      in_run_ = false;
      // Every rank took the same steps (SPMD): with none, there is nothing to meet for.
      if (run_.steps == 0) return;
      Arrival mine;
      mine.meeting = Meeting::RunEnd;
      const GroupMover::Done done = meet(std::move(mine));
      device_.wait(done.done);
      note_moved(receive_timing(), run_.receives, run_.called, done);
    }

    void drop_steps() noexcept override {
      run_depth_ = 0;
      in_run_ = false;
    }
    // LocalFabric::reopen: nothing of a stopped step stays.
    void reopen() {
      drop_steps();
      run_ = {};
      reset_bytes_sent();
      reset_receive_times();
    }
    void recv(int peer, Tensor& buf) override { receive(peer, buf, false); }
    void recv_reduce(int peer, Tensor& buf) override { receive(peer, buf, true); }

    void barrier() override {
      std::unique_lock lock(fabric_.barrier_mu);
      const uint64_t gen = fabric_.barrier_gen;
      if (++fabric_.barrier_count == fabric_.size) {
        fabric_.barrier_count = 0;
        ++fabric_.barrier_gen;
        fabric_.barrier_cv.notify_all();
      } else {
        fabric_.barrier_cv.wait(lock,
                                [&] { return fabric_.barrier_gen != gen || fabric_.aborted; });
      }
      fabric_.check_aborted(rank_);
    }

   private:
    // Leaves this rank's part at the rendezvous and returns once every rank has arrived; the last
    // to arrive acts for all (Impl::act, on its device). An Error on every rank if that failed.
    GroupMover::Done meet(Arrival mine) {
      Rendezvous& rv = fabric_.rendezvous;
      std::unique_lock lock(rv.mu);
      fabric_.check_aborted(rank_);
      rv.slots[static_cast<std::size_t>(rank_)] = std::move(mine);
      const uint64_t gen = rv.gen.load(std::memory_order_relaxed);
      if (++rv.arrived == fabric_.size) {
        // The last rank to arrive moves the step for all.
        rv.arrived = 0;
        rv.error.clear();
        try {
          rv.done = fabric_.act(device_);
        } catch (const std::exception& e) {
          rv.error = e.what();
          fabric_.run = {};
        }
        for (Arrival& a : rv.slots) a = {};  // drop the buffers' references
        rv.gen.fetch_add(1, std::memory_order_release);
        rv.cv.notify_all();
      } else {
        // Spin first, as a receive does: the last rank is usually a few microseconds away.
        lock.unlock();
        spin_until([&] {
          return rv.gen.load(std::memory_order_acquire) != gen || fabric_.aborted.load();
        });
        lock.lock();
        rv.cv.wait(lock, [&] { return rv.gen.load() != gen || fabric_.aborted; });
        if (rv.gen.load() == gen) fabric_.check_aborted(rank_);
      }
      if (!rv.error.empty()) throw Error(rv.error);
      return rv.done;  // read before this rank's next meeting lets it change
    }

    // The receive times of `moving` receives that moved together: the first from its call until
    // the moves could start and while they ran, the others as nothing more (counted, not timed
    // again).
    void note_moved(bool timed, int64_t moving, const TimeMark& called,
                    const GroupMover::Done& done) {
      if (!timed) return;
      for (int64_t i = 0; i < moving; ++i) {
        if (i == 0)
          note_receive(called, done.can_move, done.moved);
        else
          note_receive(done.moved, done.moved, done.moved);
      }
    }

    void receive(int peer, Tensor& buf, bool reduce) {
      check_peer(peer);
      const bool timed = receive_timing();
      const TimeMark called = timed ? device_.mark() : TimeMark{};
      Mailbox& box = fabric_.box(peer, rank_);
      std::shared_ptr<LocalRequest> req;
      spin_until(
          [&] { return box.queued.load(std::memory_order_acquire) > 0 || fabric_.aborted.load(); });
      {
        std::unique_lock lock(box.mu);
        box.cv.wait(lock, [&] { return !box.queue.empty() || fabric_.aborted; });
        fabric_.check_aborted(rank_);
        req = box.queue.front();
        box.queue.pop_front();
        box.queued.fetch_sub(1, std::memory_order_relaxed);
      }
      PARALAB_REQUIRE(req->buf.numel() == buf.numel(),
                      "transport: rank " + std::to_string(rank_) + " expected " +
                          std::to_string(buf.numel()) + " values from rank " +
                          std::to_string(peer) + ", got " + std::to_string(req->buf.numel()));
      // The receiver's device reads the sender's memory directly: one copy, no staging, queued
      // after the sender's work and before this rank's next.
      if (buf.numel()) {
        device_.wait(req->ready);
        const TimeMark can_move = timed ? device_.mark() : TimeMark{};
        if (reduce)
          device_.ops().add_inplace(buf, req->buf);
        else
          device_.copy_on_device(buf.raw(), req->buf.raw(), buf.bytes());
        req->consumed = device_.record();
        if (timed) note_receive(called, can_move, device_.mark());
      }
      {
        std::lock_guard lock(box.mu);
        req->done.store(true, std::memory_order_release);
      }
      box.cv.notify_all();
    }

    // This rank's run of steps (begin_steps .. end_steps), where the fabric moves collectives
    // whole.
    struct RankRun {
      int steps = 0;
      int64_t receives = 0;  // its receives that move data
      TimeMark called;       // timed: when its first step was called
    };

    Impl& fabric_;
    int rank_;
    Device& device_;
    int run_depth_ = 0;
    bool in_run_ = false;
    RankRun run_;
  };

  Impl(const std::vector<Device*>& devices, StepMoves moves)
      : size(static_cast<int>(devices.size())), boxes(static_cast<std::size_t>(size * size)) {
    for (int r = 0; r < size; ++r)
      endpoints.push_back(
          std::make_unique<Endpoint>(*this, r, *devices[static_cast<std::size_t>(r)]));
    rendezvous.slots.resize(static_cast<std::size_t>(size));
    choose_step_moves(devices, moves);
  }

  // Whole steps where every device is in one memory domain, or none queues work (CPU cores:
  // one host memory); per rank otherwise, and for a group of one. Whole collectives with whole
  // steps unless WholeSteps.
  void choose_step_moves(const std::vector<Device*>& devices, StepMoves moves) {
    description = "per rank: each message is its receiver's own copy or add";
    if (moves == StepMoves::PerRank || size < 2) return;
    const int domain = devices.front()->memory_domain();
    bool one_domain = domain >= 0, none_queue = true;
    for (const Device* d : devices) {
      one_domain = one_domain && d->memory_domain() == domain;
      none_queue = none_queue && !d->queues_work();
    }
    if (!one_domain && !none_queue) return;
    std::string why;
    mover = devices.front()->group_mover(devices, &why);
    if (!mover && moves == StepMoves::Auto) return;
    whole = true;
    collectives = moves != StepMoves::WholeSteps;
    description = collectives ? "whole collectives: each collective's steps moved together, in "
                                "order, "
                              : "whole steps: each collective step moved on its own, ";
    description += mover ? "as " + mover->describe()
                         : "by the last rank to reach it, on its own device, in order";
  }

  // What the last rank to reach a meeting does for all, on `leader`, its device: a step's moves
  // (after every rank's work so far), a run's step gathered, or a run's steps moved.
  GroupMover::Done act(Device& leader) {
    const Meeting meeting = rendezvous.slots.front().meeting;
    const bool first = rendezvous.slots.front().first;
    for (const Arrival& a : rendezvous.slots)
      PARALAB_REQUIRE(a.meeting == meeting && a.first == first,
                      std::string("transport: ranks out of step: some end a run of steps "
                                  "(a collective) where others take a step, or take a step of "
                                  "a run where others take one of their own, or begin a run "
                                  "where others go on with one"));
    if (first) run = {};  // a run that failed half-way leaves nothing behind
    if (meeting == Meeting::RunEnd) {
      Run done = std::move(run);
      run = {};
      return queue(leader, done.moves, done.after, done.timed);
    }
    const int phase = meeting == Meeting::RunStep ? run.steps : 0;
    Moves moves = collect_step(phase);
    // Marked only where a rank keeps the marks (a timed rank with a receive that moves data):
    // a mark nobody holds goes back to its pool while a captured graph would still record it.
    bool timed = false;
    std::vector<Event> after;
    for (const Arrival& a : rendezvous.slots) {
      timed = timed || (a.timed && std::any_of(a.receives.begin(), a.receives.end(),
                                               [](const Transport::StepReceive& r) {
                                                 return r.buf.numel() > 0;
                                               }));
      if (a.ready) after.push_back(a.ready);
    }
    if (meeting == Meeting::Step) return queue(leader, moves, after, timed);
    run.steps += 1;
    run.timed = run.timed || timed;
    run.after.insert(run.after.end(), after.begin(), after.end());
    for (Pending& p : moves.pending) run.moves.pending.push_back(std::move(p));
    run.moves.merged.insert(run.moves.merged.end(), moves.merged.begin(), moves.merged.end());
    return {};
  }

  // The moves of the step every rank has now reached: each receive takes the next send its peer
  // addressed to it in this step.
  Moves collect_step(int phase) {
    std::vector<Pending> pending;
    // Each ordered pair's sends of this step, in order, and how many of them receives took.
    const auto pair = [&](int from, int to) { return static_cast<std::size_t>(from * size + to); };
    std::vector<std::vector<const Tensor*>> sent(static_cast<std::size_t>(size * size));
    std::vector<std::size_t> taken(sent.size(), 0);
    for (int from = 0; from < size; ++from)
      for (const auto& s : rendezvous.slots[static_cast<std::size_t>(from)].sends)
        sent[pair(from, s.peer)].push_back(&s.buf);
    for (int r = 0; r < size; ++r)
      for (const auto& rec : rendezvous.slots[static_cast<std::size_t>(r)].receives) {
        const std::size_t p = pair(rec.peer, r);
        PARALAB_REQUIRE(taken[p] < sent[p].size(),
                        "transport: rank " + std::to_string(r) + " receives from rank " +
                            std::to_string(rec.peer) + " in a step where it sends rank " +
                            std::to_string(r) + " nothing more");
        const Tensor* src = sent[p][taken[p]++];
        PARALAB_REQUIRE(src->numel() == rec.buf.numel(),
                        "transport: rank " + std::to_string(r) + " expected " +
                            std::to_string(rec.buf.numel()) + " values from rank " +
                            std::to_string(rec.peer) + ", got " + std::to_string(src->numel()));
        if (rec.buf.numel() == 0) continue;
        // Adds into the buffer the previous receive added into: one move, in order.
        Pending* last = pending.empty() ? nullptr : &pending.back();
        if (rec.reduce && last && last->rank == r && last->reduce &&
            last->dst.raw() == rec.buf.raw() && last->dst.numel() == rec.buf.numel() &&
            static_cast<int>(last->srcs.size()) < GroupMove::kMaxSources) {
          last->srcs.push_back(*src);
          continue;
        }
        pending.push_back({r, rec.buf, {*src}, rec.reduce, phase});
      }
    for (int from = 0; from < size; ++from)
      for (int to = 0; to < size; ++to)
        PARALAB_REQUIRE(taken[pair(from, to)] == sent[pair(from, to)].size(),
                        "transport: rank " + std::to_string(from) + " sends rank " +
                            std::to_string(to) + " more in a step than rank " + std::to_string(to) +
                            " receives");
    std::vector<GroupMove> merged = merge_adjacent(as_moves(pending));
    check_disjoint(merged);
    return {std::move(pending), std::move(merged)};
  }

  static std::vector<GroupMove> as_moves(const std::vector<Pending>& pending) {
    std::vector<GroupMove> moves;
    moves.reserve(pending.size());
    for (const Pending& p : pending) {
      GroupMove m;
      m.dst = static_cast<float*>(p.dst.raw());
      m.sources = static_cast<int>(p.srcs.size());
      for (int i = 0; i < m.sources; ++i)
        m.src[i] = static_cast<const float*>(p.srcs[static_cast<std::size_t>(i)].raw());
      m.floats = p.dst.numel();
      m.reduce = p.reduce;
      m.phase = p.phase;
      moves.push_back(m);
    }
    return moves;
  }

  // Queues `moves` (one step, or a run's steps in order) on the group's mover, or without one on
  // the leader's device, after the events in `after`.
  GroupMover::Done queue(Device& leader, const Moves& moves, const std::vector<Event>& after,
                         bool timed) {
    if (mover) return mover->run(moves.merged, after, timed);
    GroupMover::Done done;
    for (const Event& e : after) leader.wait(e);
    if (timed) done.can_move = leader.mark();
    for (const Pending& p : moves.pending) {
      Tensor dst = p.dst;
      if (p.reduce) {
        for (const Tensor& src : p.srcs) leader.ops().add_inplace(dst, src);
      } else {
        leader.copy_on_device(dst.raw(), p.srcs.front().raw(), dst.bytes());
      }
    }
    if (timed) done.moved = leader.mark();
    done.done = leader.record();
    return done;
  }

  // An Error when a move writes memory another move of the step reads or writes, or reads part
  // of its own destination (an add reads its destination element by element, in place).
  static void check_disjoint(const std::vector<GroupMove>& moves) {
    auto overlap = [](const float* a, int64_t n, const float* b, int64_t m) {
      return a < b + m && b < a + n;
    };
    for (std::size_t i = 0; i < moves.size(); ++i)
      for (std::size_t j = 0; j < moves.size(); ++j) {
        const GroupMove& w = moves[i];
        const GroupMove& o = moves[j];
        bool clash = i != j && overlap(w.dst, w.floats, o.dst, o.floats);
        for (int s = 0; s < o.sources; ++s)
          clash = clash || overlap(w.dst, w.floats, o.src[s], o.floats);
        PARALAB_REQUIRE(!clash, std::string("transport: a collective step writes memory that "
                                            "one of its messages reads or writes"));
      }
  }

  // Pieces of one message (a segment cut into chunks) moved as one: consecutive single-source
  // moves of one step whose destinations and sources both continue the previous one's.
  static std::vector<GroupMove> merge_adjacent(const std::vector<GroupMove>& moves) {
    std::vector<GroupMove> out;
    for (const GroupMove& m : moves) {
      if (!out.empty()) {
        GroupMove& last = out.back();
        if (last.phase == m.phase && last.sources == 1 && m.sources == 1 &&
            last.reduce == m.reduce && last.dst + last.floats == m.dst &&
            last.src[0] + last.floats == m.src[0]) {
          last.floats += m.floats;
          continue;
        }
      }
      out.push_back(m);
    }
    return out;
  }

  Mailbox& box(int from, int to) { return boxes[static_cast<std::size_t>(from * size + to)]; }

  void check_aborted(int rank) const {
    if (aborted) throw PeerFailed("transport: rank " + std::to_string(rank) + ": a peer failed");
  }

  int size;
  std::vector<Mailbox> boxes;
  std::atomic<bool> aborted{false};
  std::mutex barrier_mu;
  std::condition_variable barrier_cv;
  int barrier_count = 0;
  uint64_t barrier_gen = 0;
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  Rendezvous rendezvous;
  bool whole = false;                 // collective steps move whole
  bool collectives = false;           // and a run of steps (a collective) moves as one unit
  Run run;                            // the run gathered so far
  std::unique_ptr<GroupMover> mover;  // null: whole steps move on the leader's device
  std::string description;
};

LocalFabric::LocalFabric(std::vector<Device*> devices, StepMoves moves)
    : devices_(std::move(devices)), impl_(std::make_unique<Impl>(devices_, moves)) {
  PARALAB_REQUIRE(!devices_.empty(), "transport: a group needs at least one device");
}

bool LocalFabric::moves_steps_whole() const { return impl_->whole; }

bool LocalFabric::moves_collectives_whole() const { return impl_->whole && impl_->collectives; }

std::string LocalFabric::step_moves_description() const { return impl_->description; }

LocalFabric::~LocalFabric() = default;

void LocalFabric::abort() {
  impl_->aborted = true;
  {
    std::lock_guard lock(impl_->rendezvous.mu);
    impl_->rendezvous.cv.notify_all();
  }
  for (auto& box : impl_->boxes) {
    std::lock_guard lock(box.mu);
    box.cv.notify_all();
  }
  std::lock_guard lock(impl_->barrier_mu);
  impl_->barrier_cv.notify_all();
}

void LocalFabric::reopen() {
  Impl& f = *impl_;
  for (auto& box : f.boxes) {
    std::lock_guard lock(box.mu);
    box.queue.clear();
    box.queued.store(0, std::memory_order_relaxed);
  }
  {
    std::lock_guard lock(f.rendezvous.mu);
    f.rendezvous.arrived = 0;
    for (auto& a : f.rendezvous.slots) a = {};
    f.rendezvous.done = {};
    f.rendezvous.error.clear();
    f.run = {};
  }
  {
    std::lock_guard lock(f.barrier_mu);
    f.barrier_count = 0;
  }
  for (auto& e : f.endpoints) e->reopen();
  f.aborted = false;
}

Transport& LocalFabric::endpoint(int rank) {
  PARALAB_REQUIRE(rank >= 0 && rank < size(), "transport: no rank " + std::to_string(rank));
  return *impl_->endpoints[static_cast<std::size_t>(rank)];
}

}  // namespace paralab
