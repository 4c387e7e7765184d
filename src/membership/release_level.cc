#include "membership/release_level.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace pfsnet {

namespace {

constexpr LevelFeature kFeatures[] = {
    {2, "wire_v1_refused",
     "every connection that can speak wire version 2 (TCP, in-memory) refuses version 1 and "
     "any peer below the level: each handshake's proof covers the version offer, the fields "
     "and every NID, and no peer can be talked down to version 1",
     "a node of level 1 (it speaks only wire version 1: 8827b49 and before) can no longer "
     "connect to any node nor register with the MGS"},
};

constexpr std::string_view kRecordFormat = "format pfsnet-release-level 1";

std::string errno_text(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

}  // namespace

std::span<const LevelFeature> level_features() { return kFeatures; }

std::vector<LevelFeature> features_between(uint16_t from, uint16_t to) {
  std::vector<LevelFeature> v;
  for (const LevelFeature& f : kFeatures)
    if (f.level > from && f.level <= to) v.push_back(f);
  return v;
}

UpgradeRep decide_level(const UpgradeReq& q, uint16_t level, uint16_t mgs_level,
                        const std::vector<NodeLevel>& nodes) {
  UpgradeRep rep;
  rep.level = level;
  rep.mgs_level = mgs_level;
  rep.target = q.level ? q.level : mgs_level;
  rep.total = static_cast<uint32_t>(nodes.size());
  std::vector<std::string> holding;  // not dead, below the target
  for (const NodeLevel& n : nodes) {
    if (n.level != 0 && n.level >= rep.target) continue;
    ++rep.below;
    if (rep.nodes.size() < kMaxStatusPage) rep.nodes.push_back(n);
    if (n.state != NodeState::kDead) holding.push_back(n.name);
  }
  std::sort(rep.nodes.begin(), rep.nodes.end(),
            [](const NodeLevel& a, const NodeLevel& b) { return a.id < b.id; });
  if (rep.target > mgs_level) {
    rep.refusal = "the MGS's release speaks release levels up to " + std::to_string(mgs_level) +
                  ", not " + std::to_string(rep.target) + ": upgrade the MGS first";
  } else if (rep.target < level) {
    rep.refusal = "a release level is never lowered: the cluster's is " + std::to_string(level) +
                  ", not " + std::to_string(rep.target);
  } else if (q.commit && rep.target > level && !holding.empty() && !q.force) {
    std::string names;
    for (size_t i = 0; i < holding.size() && i < 8; ++i) names += (i ? ", " : "") + holding[i];
    if (holding.size() > 8) names += ", ...";
    rep.refusal = std::to_string(holding.size()) + " node(s) not dead are below level " +
                  std::to_string(rep.target) + " or not heard from yet: " + names +
                  " (upgrade them, or --force to shut them out)";
  }
  return rep;
}

std::string encode_level_record(const LevelRecord& r) {
  std::string by = r.by;
  std::replace(by.begin(), by.end(), '\n', ' ');
  return std::string(kRecordFormat) + "\nlevel " + std::to_string(r.level) + "\nset_unix_ms " +
         std::to_string(r.set_unix_ms) + "\nby " + by + "\n";
}

Result<LevelRecord> decode_level_record(std::string_view text) {
  auto bad = [](const std::string& why) {
    return Status(Code::kProtocol, "release level record: " + why);
  };
  LevelRecord r;
  bool format = false, level = false, set = false, by = false;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) return bad("its last line is not ended");
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    size_t sp = line.find(' ');
    std::string_view key = line.substr(0, sp);
    std::string_view value = sp == std::string_view::npos ? "" : line.substr(sp + 1);
    auto number = [&](int64_t lo, int64_t hi, int64_t* out) {
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), *out);
      return ec == std::errc() && p == value.data() + value.size() && *out >= lo && *out <= hi;
    };
    int64_t v = 0;
    if (!format) {
      if (line != kRecordFormat) return bad("not of format 1: '" + std::string(line) + "'");
      format = true;
    } else if (key == "level" && !level) {
      if (!number(1, 65535, &v)) return bad("level '" + std::string(value) + "'");
      r.level = static_cast<uint16_t>(v);
      level = true;
    } else if (key == "set_unix_ms" && !set) {
      if (!number(0, INT64_MAX, &v)) return bad("set_unix_ms '" + std::string(value) + "'");
      r.set_unix_ms = v;
      set = true;
    } else if (key == "by" && !by) {
      r.by = std::string(value);
      by = true;
    } else {
      return bad("unexpected line '" + std::string(line.substr(0, 64)) + "'");
    }
  }
  if (!format || !level || !set || !by) return bad("a line is missing");
  return r;
}

Result<LevelRecord> read_level_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return LevelRecord{};
    return Status(Code::kInvalidArgument, errno_text("reading", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > 4096) return Status(Code::kInvalidArgument, path + ": larger than 4 KiB");
  auto r = decode_level_record(text);
  if (!r.ok()) return Status(Code::kInvalidArgument, path + ": " + r.status().message());
  return r;
}

Status write_level_file(const std::string& path, const LevelRecord& r) {
  const std::string tmp = path + ".new";
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return Status(Code::kInternal, "creating the directory of " + path + ": " + ec.message());
  const std::string text = encode_level_record(r);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status(Code::kInternal, errno_text("creating", tmp));
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  std::string err = ok ? "" : errno_text("writing", tmp);
  ::close(fd);
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno_text("renaming to", path);
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return Status(Code::kInternal, err);
  }
  std::string dir = path.substr(0, path.find_last_of('/') + 1);
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

}  // namespace pfsnet
