#include "membership/etcd_leadership.h"

#include <cstdio>

#include "base/log.h"
#include "base/thread_name.h"

namespace pfsnet {

EtcdLeadership::EtcdLeadership(std::unique_ptr<EtcdClient> etcd, LeaseOptions o, std::string key,
                               std::string self, Clock& clock)
    : etcd_(std::move(etcd)),
      key_(std::move(key)),
      self_(std::move(self)),
      table_prefix_(key_ + "/table/"),
      level_key_(key_ + "/level"),
      clock_(clock),
      core_(o, self_) {
  worker_ = std::thread([this] { run(); });
}

EtcdLeadership::~EtcdLeadership() { stop(false); }

void EtcdLeadership::tick() {
  MutexLock lk(mu_);
  if (stopping_ || job_) return;
  const TimePoint now = clock_.now();
  switch (core_.next(now)) {
    case LeaderLease::Call::kNone:
      if (level_save_) {
        LevelSave ls = std::move(*level_save_);
        level_save_.reset();
        if (!core_.leading(now)) {
          // Outside the lock: `done` may call back into this object.
          job_ = [done = std::move(ls.done)] {
            done(Status(Code::kRejected, "this MGS leads no more"));
          };
          break;
        }
        job_ = [this, ls = std::move(ls)] {
          Status st = etcd_->put_if_leader(key_, ls.epoch, {{level_key_, ls.record}});
          if (!st.ok())
            PFS_LOG_WARN("MGS leadership: keeping the release level in etcd failed: {}",
                         st.to_string());
          ls.done(st);
        };
        break;
      }
      if (to_save_.empty() || !core_.leading(now)) return;
      {
        // Up to 64 chunks and 768 KiB (1 MiB in base64, under etcd's 1.5 MiB request
        // limit) in one transaction, guarded by the leader key's epoch.
        std::vector<std::pair<std::string, std::string>> kvs;
        std::vector<std::pair<uint32_t, std::string>> taken;
        size_t bytes = 0;
        while (!to_save_.empty() && kvs.size() < 64 &&
               (kvs.empty() || bytes + to_save_.begin()->second.size() <= (768u << 10))) {
          bytes += to_save_.begin()->second.size();
          auto it = to_save_.begin();
          char name[16];
          std::snprintf(name, sizeof name, "%08u", it->first);
          kvs.emplace_back(table_prefix_ + name, it->second);
          taken.emplace_back(it->first, std::move(it->second));
          to_save_.erase(it);
        }
        job_ = [this, kvs = std::move(kvs), taken = std::move(taken),
                epoch = save_epoch_]() mutable {
          Status st = etcd_->put_if_leader(key_, epoch, kvs);
          MutexLock l(mu_);
          if (st.ok()) {
            ++table_counters_.saves;
            table_counters_.chunks_saved += taken.size();
            return;
          }
          ++table_counters_.save_failures;
          PFS_LOG_WARN_LIMITED("etcd.save", "MGS leadership: saving the table failed: {}",
                               st.to_string());
          if (save_epoch_ != epoch) return;  // another epoch's table now
          for (auto& [c, v] : taken) to_save_.emplace(c, std::move(v));  // unless newer came
        };
      }
      break;
    case LeaderLease::Call::kGrant:
      job_ = [this, ttl = core_.options().ttl] {
        TimePoint sent = clock_.now();
        auto g = etcd_->grant(ttl);
        MutexLock l(mu_);
        if (!g.ok()) {
          failed_locked(LeaderLease::Call::kGrant, "lease grant", g.status());
        } else {
          core_.granted(g->lease, g->ttl, sent);
        }
      };
      break;
    case LeaderLease::Call::kCampaign:
      job_ = [this, lease = core_.lease(), was = core_.view(now)] {
        TimePoint sent = clock_.now();
        auto c = etcd_->campaign(key_, self_, lease);
        std::optional<std::vector<std::string>> table;
        std::optional<std::string> level;
        if (c.ok() && c->leader == self_ && c->leader_lease == lease) {
          // Won (now or before): it leads only with its predecessor's table in hand.
          bool have;
          {
            MutexLock l(mu_);
            have = loaded_epoch_ == c->epoch;
          }
          if (!have) {
            auto kvs = etcd_->range_prefix(table_prefix_);
            if (!kvs.ok()) {
              MutexLock l(mu_);
              return failed_locked(LeaderLease::Call::kCampaign, "reading the MGS table",
                                   kvs.status());
            }
            table.emplace();
            for (auto& [k, v] : *kvs) table->push_back(std::move(v));
            auto lv = etcd_->range_prefix(level_key_);
            if (!lv.ok()) {
              MutexLock l(mu_);
              return failed_locked(LeaderLease::Call::kCampaign, "reading the release level",
                                   lv.status());
            }
            level.emplace();
            for (auto& [k, v] : *lv)
              if (k == level_key_) *level = std::move(v);
          }
        }
        MutexLock l(mu_);
        if (!c.ok()) return failed_locked(LeaderLease::Call::kCampaign, "campaign", c.status());
        if (table) {
          ++table_counters_.loads;
          table_counters_.chunks_loaded += table->size();
          loaded_epoch_ = c->epoch;
          loaded_ = std::move(table);
          loaded_level_ = std::move(level);
        }
        core_.campaigned(*c, sent);
        auto v = core_.view(clock_.now());
        if (v.role != was.role || v.epoch != was.epoch) {
          if (v.role == LeaderLease::Role::kLeader) {
            PFS_LOG_WARN("MGS leadership: {} leads, epoch {} (etcd {})", self_, v.epoch,
                         etcd_->endpoint());
          } else if (v.role == LeaderLease::Role::kFollower) {
            PFS_LOG_INFO("MGS leadership: {} follows {}, epoch {}", self_, v.leader, v.epoch);
          }
        }
      };
      break;
    case LeaderLease::Call::kKeepAlive:
      job_ = [this, lease = core_.lease(), leading = core_.leading(now)] {
        TimePoint sent = clock_.now();
        auto t = etcd_->keepalive(lease);
        MutexLock l(mu_);
        if (!t.ok()) return failed_locked(LeaderLease::Call::kKeepAlive, "keep-alive", t.status());
        if (*t <= Duration::zero() && leading)
          PFS_LOG_WARN("MGS leadership: {} lost its lease: leads no more", self_);
        core_.kept_alive(*t, sent);
      };
      break;
  }
  cv_.notify_one();
}

void EtcdLeadership::failed_locked(LeaderLease::Call c, const char* what, const Status& s) {
  PFS_LOG_WARN_LIMITED(std::string("etcd.") + what, "MGS leadership: {} failed: {}", what,
                       s.to_string());
  core_.failed(c, clock_.now());
}

std::optional<std::vector<std::string>> EtcdLeadership::take_table(uint64_t epoch) {
  MutexLock lk(mu_);
  if (loaded_epoch_ != epoch || !loaded_) return std::nullopt;
  return std::exchange(loaded_, std::nullopt);
}

std::optional<std::string> EtcdLeadership::take_level(uint64_t epoch) {
  MutexLock lk(mu_);
  if (loaded_epoch_ != epoch || !loaded_level_) return std::nullopt;
  return std::exchange(loaded_level_, std::nullopt);
}

void EtcdLeadership::save_level(uint64_t epoch, std::string record,
                                std::function<void(Status)> done) {
  std::function<void(Status)> replaced;
  {
    MutexLock lk(mu_);
    if (stopping_) {
      replaced = std::move(done);
    } else {
      if (level_save_) replaced = std::move(level_save_->done);  // a newer one goes instead
      level_save_ = LevelSave{epoch, std::move(record), std::move(done)};
    }
  }
  if (replaced) replaced(Status(Code::kCancelled, "another release level was saved instead"));
}

void EtcdLeadership::save(uint64_t epoch, std::vector<std::pair<uint32_t, std::string>> chunks) {
  MutexLock lk(mu_);
  if (epoch != save_epoch_) {
    to_save_.clear();
    save_epoch_ = epoch;
  }
  for (auto& [c, v] : chunks) to_save_[c] = std::move(v);
}

EtcdLeadership::TableCounters EtcdLeadership::table_counters() {
  MutexLock lk(mu_);
  return table_counters_;
}

LeaderLease::View EtcdLeadership::view() {
  MutexLock lk(mu_);
  return core_.view(clock_.now());
}

LeaderLease::Counters EtcdLeadership::counters() {
  MutexLock lk(mu_);
  return core_.counters();
}

void EtcdLeadership::stop(bool resign) {
  std::optional<LevelSave> unsaved;
  {
    MutexLock lk(mu_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
    job_ = nullptr;  // a call not started yet is not made
    unsaved = std::exchange(level_save_, std::nullopt);
    if (resign && core_.lease() != 0) {
      job_ = [this, lease = core_.lease()] {
        {
          MutexLock l(mu_);
          core_.resigned();  // leads no more from this instant, whatever etcd answers
        }
        Status s = etcd_->revoke(lease);
        if (!s.ok()) PFS_LOG_WARN("MGS leadership: revoking the lease failed: {}", s.to_string());
      };
    }
    cv_.notify_one();
  }
  if (unsaved) unsaved->done(Status(Code::kCancelled, "the MGS is stopping"));
  if (worker_.joinable()) worker_.join();
}

void EtcdLeadership::run() {
  name_this_thread("pfs-etcd");
  for (;;) {
    std::function<void()> job;
    {
      MutexLock lk(mu_);
      // Idle until a job or the stop; no timing here (the owner's tick decides when).
      cv_.wait(lk, [&]() REQUIRES(mu_) { return job_ != nullptr || stopping_; });
      if (!job_) return;  // stopping, nothing left
      job = std::move(job_);
      job_ = nullptr;
    }
    job();
    MutexLock lk(mu_);
    if (stopping_ && !job_) return;
  }
}

}  // namespace pfsnet
