// The deterministic fuzz driver that CTest runs: every seed of a target's corpus as it is
// (tests/fuzz/corpus/TARGET, the crashers found so far among them), then seeded mutations
// of them (bit flips, random bytes, inserted, deleted and repeated ranges, splices of two
// seeds, numbers and JSON values swapped for hostile ones) until --runs or --seconds.
// The same seed gives the same inputs; `--seed date` takes today's date (YYYYMMDD, UTC),
// so that each day's test runs try new inputs, and the seed is printed first so that a
// failure can be replayed. Before each input it writes it to $TMPDIR/dpb_fuzz_last_TARGET,
// so an input that crashes the process can be kept as a regression case.
//
//   fuzz_driver TARGET --corpus DIR [--runs N] [--seconds S] [--seed K|date]
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/fuzz/targets.h"

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

const char* kHostile[] = {"-1e308", "1e309",  "null", "-1",    "0",         "18446744073709551616", "\"\"",
                          "[]",     "{}",     "true", "1e-320", "2147483648", "-9223372036854775809", "NaN",
                          "\"\\u0000\"", "[[[[[[[[[[", "\"\\ud800\"", "4294967295", "65536", "1.5"};

Bytes read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

class Mutator {
 public:
  Mutator(uint64_t seed, const std::vector<Bytes>& seeds) : rng_(seed), seeds_(seeds) {}
  Bytes next() {
    Bytes b = seeds_[pick(seeds_.size())];
    const int n = 1 + static_cast<int>(pick(4));
    for (int i = 0; i < n; ++i) mutate(b);
    if (b.size() > (1u << 20)) b.resize(1u << 20);
    return b;
  }

 private:
  size_t pick(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }
  void mutate(Bytes& b) {
    switch (pick(9)) {
      case 0:  // flip a bit
        if (!b.empty()) b[pick(b.size())] ^= static_cast<uint8_t>(1u << pick(8));
        break;
      case 1:  // a random byte
        if (!b.empty()) b[pick(b.size())] = static_cast<uint8_t>(rng_());
        break;
      case 2: {  // insert random bytes
        Bytes add(1 + pick(16));
        for (auto& c : add) c = static_cast<uint8_t>(rng_());
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(pick(b.size() + 1)), add.begin(), add.end());
        break;
      }
      case 3: {  // delete a range
        if (b.empty()) break;
        const size_t at = pick(b.size()), len = 1 + pick(std::min<size_t>(64, b.size() - at));
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + len));
        break;
      }
      case 4: {  // repeat a range
        if (b.empty()) break;
        const size_t at = pick(b.size()), len = 1 + pick(std::min<size_t>(256, b.size() - at));
        Bytes r(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + len));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), r.begin(), r.end());
        break;
      }
      case 5:  // truncate
        b.resize(pick(b.size() + 1));
        break;
      case 6: {  // splice with another seed
        const Bytes& o = seeds_[pick(seeds_.size())];
        const size_t cut = pick(b.size() + 1), from = pick(o.size() + 1);
        b.resize(cut);
        b.insert(b.end(), o.begin() + static_cast<std::ptrdiff_t>(from), o.end());
        break;
      }
      default: {  // a number or JSON value replaced by a hostile one
        if (b.empty()) break;
        size_t at = pick(b.size());
        while (at < b.size() && !(std::isdigit(b[at]) || b[at] == '"' || b[at] == '-' || b[at] == 'n' || b[at] == 't'))
          ++at;
        if (at >= b.size()) break;
        size_t end = at + 1;
        if (b[at] == '"') {
          while (end < b.size() && b[end] != '"') ++end;
          end = std::min(end + 1, b.size());
        } else {
          while (end < b.size() && (std::isalnum(b[end]) || b[end] == '.' || b[end] == '-' || b[end] == '+')) ++end;
        }
        const char* h = kHostile[pick(std::size(kHostile))];
        b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(end));
        b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), h, h + std::strlen(h));
        break;
      }
    }
  }
  std::mt19937_64 rng_;
  const std::vector<Bytes>& seeds_;
};

int usage(const char* why) {
  std::cerr << "fuzz_driver: " << why
            << "\nusage: fuzz_driver TARGET --corpus DIR [--runs N] [--seconds S] [--seed K|date]\n"
            << "targets:";
  for (const auto& t : dpb::fuzz::targets()) std::cerr << "\n  " << t.name << "  " << t.what;
  std::cerr << "\n";
  return 2;
}

// Today's date as a number, YYYYMMDD (UTC).
uint64_t date_seed() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  return static_cast<uint64_t>((utc.tm_year + 1900) * 10000 + (utc.tm_mon + 1) * 100 + utc.tm_mday);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage("no target");
  const dpb::fuzz::Target* target = dpb::fuzz::find_target(argv[1]);
  if (!target) return usage((std::string("unknown target '") + argv[1] + "'").c_str());
  std::string corpus;
  long runs = 2000;
  double seconds = 10;
  uint64_t seed = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--corpus") corpus = v;
    else if (k == "--runs") runs = std::stol(v);
    else if (k == "--seconds") seconds = std::stod(v);
    else if (k == "--seed") {
      if (v == "date") {
        seed = date_seed();
      } else if (!v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() <= 19) {
        seed = std::stoull(v);
      } else {
        return usage(("--seed must be a number or 'date', got '" + v + "'").c_str());
      }
    } else return usage(("unknown flag " + k).c_str());
  }
  const fs::path dir = fs::path(corpus) / target->name;
  if (corpus.empty() || !fs::is_directory(dir)) return usage(("no corpus folder " + dir.string()).c_str());
  std::vector<Bytes> seeds;
  std::vector<fs::path> names;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) names.push_back(e.path());
  std::sort(names.begin(), names.end());
  for (const auto& p : names) seeds.push_back(read_bytes(p));
  if (seeds.empty()) return usage(("empty corpus folder " + dir.string()).c_str());

  const fs::path last = fs::temp_directory_path() / (std::string("dpb_fuzz_last_") + target->name);
  auto run = [&](const Bytes& b, const std::string& label) {
    std::ofstream(last, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    std::string why;
    if (dpb::fuzz::run_one(*target, b.data(), b.size(), &why)) return true;
    std::cerr << "fuzz_driver: " << target->name << ": " << label << ": " << why << "\n  the input: " << last.string()
              << " (keep it under " << dir.string() << "/crashers/)\n";
    return false;
  };
  for (size_t i = 0; i < seeds.size(); ++i)
    if (!run(seeds[i], "seed " + names[i].string())) return 1;
  std::cout << target->name << ": seed " << seed << " (replay: fuzz_driver " << target->name << " --corpus "
            << corpus << " --runs " << runs << " --seconds " << seconds << " --seed " << seed << ")" << std::endl;
  Mutator m(seed, seeds);
  const auto t0 = std::chrono::steady_clock::now();
  long done = 0;
  for (; done < runs && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds; ++done)
    if (!run(m.next(), "mutation " + std::to_string(done) + " of seed " + std::to_string(seed))) return 1;
  std::error_code ec;
  fs::remove(last, ec);
  std::cout << target->name << ": " << seeds.size() << " seed(s) and " << done << " mutation(s), no failure\n";
  return 0;
}
