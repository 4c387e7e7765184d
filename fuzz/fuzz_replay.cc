// Runs a fuzz target's body without libFuzzer, in every build (a ctest per target): its
// seeds, every file of the corpus directories given, and deterministic mutations of them
// (bytes flipped, inserted, removed, runs repeated, cuts). Exits non-zero only by crashing
// -- the body traps on a broken invariant -- so ctest reports any failure.
//
//   <target>_replay [--mutations N] [--write-seeds DIR] [CORPUS_DIR...]
//
// --write-seeds writes the seeds as files (the start of a libFuzzer corpus) and exits.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "fuzz.h"

namespace {

using Input = std::vector<uint8_t>;

void mutate(std::mt19937_64& rng, Input* in) {
  int n = 1 + static_cast<int>(rng() % 4);
  for (int k = 0; k < n; ++k) {
    size_t len = in->size();
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (len) (*in)[rng() % len] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // set a byte to a boundary value
        if (len) {
          static constexpr uint8_t kVals[] = {0, 1, 0x7f, 0x80, 0xfe, 0xff};
          (*in)[rng() % len] = kVals[rng() % 6];
        }
        break;
      case 2:  // insert a random byte
        in->insert(in->begin() + static_cast<std::ptrdiff_t>(len ? rng() % (len + 1) : 0),
                   static_cast<uint8_t>(rng()));
        break;
      case 3:  // remove a byte
        if (len) in->erase(in->begin() + static_cast<std::ptrdiff_t>(rng() % len));
        break;
      case 4:  // cut the tail
        if (len) in->resize(rng() % len);
        break;
      case 5:  // repeat a run
        if (len && len < 1 << 16) {
          size_t at = rng() % len, run = 1 + rng() % std::min<size_t>(len - at, 64);
          Input r(in->begin() + static_cast<std::ptrdiff_t>(at),
                  in->begin() + static_cast<std::ptrdiff_t>(at + run));
          in->insert(in->begin() + static_cast<std::ptrdiff_t>(at), r.begin(), r.end());
        }
        break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  size_t mutations = 100000;
  std::vector<std::string> dirs;
  std::string write_dir;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mutations" && i + 1 < argc)
      mutations = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--write-seeds" && i + 1 < argc)
      write_dir = argv[++i];
    else
      dirs.push_back(a);
  }
  std::vector<Input> base = pfsnet::fuzz::fuzz_seeds();
  if (!write_dir.empty()) {
    fs::create_directories(write_dir);
    for (size_t i = 0; i < base.size(); ++i) {
      std::ofstream f(fs::path(write_dir) / ("seed-" + std::to_string(i)), std::ios::binary);
      f.write(reinterpret_cast<const char*>(base[i].data()),
              static_cast<std::streamsize>(base[i].size()));
    }
    std::printf("%zu seeds written to %s\n", base.size(), write_dir.c_str());
    return 0;
  }
  size_t seeds = base.size(), files = 0;
  for (const std::string& d : dirs) {
    if (!fs::is_directory(d)) continue;  // a target without a checked-in corpus yet
    for (const auto& e : fs::directory_iterator(d)) {
      if (!e.is_regular_file()) continue;
      std::ifstream f(e.path(), std::ios::binary);
      base.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
      ++files;
    }
  }
  for (const Input& in : base) LLVMFuzzerTestOneInput(in.data(), in.size());
  std::mt19937_64 rng(20261125);
  Input buf;
  for (size_t i = 0; i < mutations; ++i) {
    if (base.empty() || rng() % 16 == 0) {
      buf.resize(rng() % 256);
      for (auto& b : buf) b = static_cast<uint8_t>(rng());
    } else {
      buf = base[rng() % base.size()];
    }
    mutate(rng, &buf);
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
  }
  std::printf("%s: %zu seeds, %zu corpus files, %zu mutations: no crash\n",
              fs::path(argv[0]).filename().c_str(), seeds, files, mutations);
  return 0;
}
