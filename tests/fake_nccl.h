// A stand-in for NCCL's point-to-point on CPU devices (tests only), for the grouped transport
// (strategies/collectives/p2p_transport.h): sends and receives are posted in groups, and a send
// completes only when its receive is posted (a rendezvous), as NCCL documents; group_end()
// returns when every operation of the group has, so the calling thread plays the rank's stream.
// A transport that held a send back behind a receive its peer cannot answer without it would
// deadlock here, reported as an Error after the wire's patience.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"

namespace paralab::testing {

class Wire {
 public:
  explicit Wire(int k, std::chrono::milliseconds wait = std::chrono::seconds(10))
      : patience(wait), offers_(static_cast<std::size_t>(k * k)) {}
  const std::chrono::milliseconds patience;  // how long a group waits before it is a deadlock
  struct Offer {
    std::vector<float> data;
    bool taken = false;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Offer>>& box(int from, int to, int k) {
    return offers_[static_cast<std::size_t>(from * k + to)];
  }

 private:
  std::vector<std::deque<std::shared_ptr<Offer>>> offers_;
};

class FakeNcclPointToPoint final : public NativePointToPoint {
 public:
  FakeNcclPointToPoint(Wire& wire, int rank, int size) : wire_(wire), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void group_start() override {
    ASSERT_FALSE(in_group_) << "nested group";
    in_group_ = true;
  }
  void send(const Tensor& buf, int peer) override {
    ASSERT_TRUE(in_group_) << "rank " << rank_ << ": a send outside a group";
    sends_.push_back({peer, buf.to_host_f32()});
  }
  void recv(Tensor& buf, int peer) override {
    ASSERT_TRUE(in_group_) << "rank " << rank_ << ": a receive outside a group";
    recvs_.push_back({peer, &buf});
  }
  void group_end() override {
    std::unique_lock lock(wire_.mu);
    std::vector<std::shared_ptr<Wire::Offer>> mine;
    for (auto& [peer, data] : sends_) {
      mine.push_back(std::make_shared<Wire::Offer>(Wire::Offer{std::move(data)}));
      wire_.box(rank_, peer, size_).push_back(mine.back());
    }
    wire_.cv.notify_all();
    for (auto& [peer, buf] : recvs_) {
      auto& box = wire_.box(peer, rank_, size_);
      if (!wire_.cv.wait_for(lock, wire_.patience, [&] { return !box.empty(); }))
        throw Error("rank " + std::to_string(rank_) + ": deadlock waiting for rank " +
                    std::to_string(peer));
      auto offer = box.front();
      box.pop_front();
      if (static_cast<int64_t>(offer->data.size()) != buf->numel()) throw Error("size mismatch");
      buf->copy_from_host(offer->data);
      offer->taken = true;
      wire_.cv.notify_all();  // its sender may be waiting for it while this group waits on
    }
    wire_.cv.notify_all();
    for (auto& offer : mine)
      if (!wire_.cv.wait_for(lock, wire_.patience, [&] { return offer->taken; }))
        throw Error("rank " + std::to_string(rank_) + ": deadlock, a send never received");
    largest_group = std::max(largest_group, static_cast<int>(sends_.size() + recvs_.size()));
    sends_.clear();
    recvs_.clear();
    in_group_ = false;
    ++groups;
  }
  // NCCL's allreduce over the same wire: every rank's buffer to every other, then the sum in
  // rank order on each rank (the same bits everywhere).
  void allreduce_sum(Tensor& buf) override {
    ASSERT_FALSE(in_group_) << "an allreduce inside a group";
    ++allreduces;
    std::vector<Tensor> from(static_cast<std::size_t>(size_));
    group_start();
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      send(buf, p);
      from[static_cast<std::size_t>(p)] = Tensor::empty(buf.device(), {buf.numel()});
      recv(from[static_cast<std::size_t>(p)], p);
    }
    group_end();
    from[static_cast<std::size_t>(rank_)] = buf;
    std::vector<float> sum(static_cast<std::size_t>(buf.numel()), 0.0f);
    for (const Tensor& part : from) {
      const auto v = part.to_host_f32();
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];
    }
    buf.copy_from_host(sum);
  }
  int groups = 0;
  int largest_group = 0;  // the most operations one group held
  int allreduces = 0;

 private:
  Wire& wire_;
  int rank_, size_;
  bool in_group_ = false;
  std::vector<std::pair<int, std::vector<float>>> sends_;
  std::vector<std::pair<int, Tensor*>> recvs_;
};

}  // namespace paralab::testing
