// NodeCore's parts: opened before the NIs listen, started once they do with the node's one
// timer queue, stopped in reverse before the core; a part that fails stops the start with
// its error, and only what was opened is stopped.
#include "rpc/node_core.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rpc/sim_cluster.h"

namespace pfsnet {
namespace {

using namespace std::chrono_literals;

Nid node_nid(int host) { return *Nid::parse("10.0.1." + std::to_string(host) + "@tcp"); }

// Records what the core did to it (and whether the core was started at the time) in one
// log shared by every part; its round runs every 100 ms on the queue it was given.
class Recorder final : public NodePart {
 public:
  Recorder(std::string name, std::vector<std::string>& log, NodeCore*& core, Clock& clock)
      : name_(std::move(name)), log_(log), core_(core), clock_(clock) {}
  const char* part_name() const override { return name_.c_str(); }
  Status open() override {
    log_.push_back("open " + name_ + (core_->started() ? " (started)" : ""));
    return open_fails ? Status(Code::kNotFound, "no such target") : Status::Ok();
  }
  Status start(TimerQueue& queue) override {
    log_.push_back("start " + name_ + (core_->started() ? "" : " (not started)") +
                   (&queue == &core_->timer_queue() ? "" : " (another queue)"));
    if (start_fails) return Status(Code::kInvalidArgument, "bad setting");
    ticker_.start(queue, clock_, 100ms, [this](TimePoint) { ++rounds; });
    return Status::Ok();
  }
  void stop() override {
    ticker_.stop();
    log_.push_back("stop " + name_);
  }
  bool open_fails = false, start_fails = false;
  int rounds = 0;

 private:
  std::string name_;
  std::vector<std::string>& log_;
  NodeCore*& core_;
  Clock& clock_;
  Repeating ticker_;
};

class NodeCorePartsTest : public ::testing::Test {
 protected:
  NodeCorePartsTest() {
    hub_.set_clock(&clock_);
    core_ = std::make_unique<NodeCore>(mem_node_options(hub_, clock_, {node_nid(1)}, NetOptions{},
                                                        RpcOptions{}, "parts-key-0123"));
    raw_ = core_.get();
    for (const char* n : {"a", "b", "c"})
      parts_.push_back(std::make_unique<Recorder>(n, log_, raw_, clock_));
    for (auto& p : parts_) core_->add_part(*p);
  }
  // Manual time in 100 ms steps, the hub running what came due.
  void run_for(Duration d) {
    for (Duration t{}; t < d; t += 100ms) {
      clock_.advance(100ms);
      hub_.pump();
    }
  }
  ManualClock clock_;
  MemHub hub_;
  std::unique_ptr<NodeCore> core_;
  NodeCore* raw_ = nullptr;
  std::vector<std::string> log_;
  std::vector<std::unique_ptr<Recorder>> parts_;
};

TEST_F(NodeCorePartsTest, OpenedBeforeTheNisListenStartedOnTheQueueStoppedInReverse) {
  ASSERT_TRUE(core_->start(Duration::zero()).ok());
  EXPECT_EQ(log_, (std::vector<std::string>{"open a", "open b", "open c", "start a", "start b",
                                            "start c"}));
  run_for(1s);
  for (auto& p : parts_) EXPECT_EQ(p->rounds, 10) << p->part_name();
  log_.clear();
  core_->stop();
  EXPECT_EQ(log_, (std::vector<std::string>{"stop c", "stop b", "stop a"}));
  run_for(1s);
  for (auto& p : parts_) EXPECT_EQ(p->rounds, 10) << p->part_name() << ": a round after stop";
  core_->stop();  // once
  EXPECT_EQ(log_.size(), 3u);
}

TEST_F(NodeCorePartsTest, APartThatCannotOpenStopsTheStartAndOnlyWhatOpenedIsStopped) {
  parts_[1]->open_fails = true;
  Status s = core_->start(Duration::zero());
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), "no such target");
  EXPECT_FALSE(core_->started());  // the NIs never listened
  core_->stop();
  EXPECT_EQ(log_, (std::vector<std::string>{"open a", "open b", "stop a"}));
}

TEST_F(NodeCorePartsTest, APartThatCannotStartIsNamedInTheError) {
  parts_[1]->start_fails = true;
  Status s = core_->start(Duration::zero());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "b: bad setting");
  core_->stop();
  EXPECT_EQ(log_, (std::vector<std::string>{"open a", "open b", "open c", "start a", "start b",
                                            "stop c", "stop b", "stop a"}));
}

}  // namespace
}  // namespace pfsnet
