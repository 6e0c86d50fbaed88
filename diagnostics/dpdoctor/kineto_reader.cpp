#include "diagnostics/dpdoctor/kineto_reader.h"

#include <simdjson.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <thread>

#include "engine/core/error.h"
#include "engine/core/text.h"

namespace dpb::doctor {

namespace {

namespace sj = simdjson::ondemand;

constexpr size_t kChunk = size_t{1} << 22;           // bytes read at a time
constexpr size_t kMaxEvent = size_t{64} << 20;       // one event, or one top-level value we read
constexpr size_t kMaxKept = size_t{40} << 20;        // events kept per file
constexpr double kMaxMicros = 1e15;                  // ~31 years after the epoch
constexpr int kMaxDepth = 256;

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The decompressed bytes of a file, a chunk at a time, in a buffer that always keeps
// simdjson's padding after the data.
class Input {
 public:
  explicit Input(const std::string& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    DPB_CHECK(file_ != nullptr) << "cannot open trace '" << escape_untrusted(path) << "'";
    gzbuffer(file_, 1 << 20);
  }
  ~Input() {
    if (file_) gzclose(file_);
  }
  Input(const Input&) = delete;
  Input& operator=(const Input&) = delete;

  // Makes at least `n` bytes available from pos(); false at the end of the file.
  bool have(size_t n) {
    while (end_ - pos_ < n) {
      if (eof_) return false;
      if (pos_ > 0) {  // keep only what is not consumed yet
        std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
        offset_ += pos_;
        end_ -= pos_;
        pos_ = 0;
      }
      const size_t want = std::max(kChunk, n - (end_ - pos_));
      if (buf_.size() < end_ + want + simdjson::SIMDJSON_PADDING) buf_.resize(end_ + want + simdjson::SIMDJSON_PADDING);
      const int got = gzread(file_, buf_.data() + end_, static_cast<unsigned>(want));
      if (got < 0) {
        int code = 0;
        const char* msg = gzerror(file_, &code);
        fail(std::string("is corrupt (") + (msg ? msg : "unreadable") + ")");
      }
      if (got == 0) eof_ = true;
      end_ += static_cast<size_t>(got);
    }
    return true;
  }
  int peek() { return have(1) ? static_cast<unsigned char>(buf_[pos_]) : -1; }
  int get() {
    const int c = peek();
    if (c >= 0) ++pos_;
    return c;
  }
  void skip_ws() {
    for (int c = peek(); c == ' ' || c == '\n' || c == '\r' || c == '\t'; c = peek()) ++pos_;
  }
  void expect(char c, const char* what) {
    skip_ws();
    const int got = get();
    if (got != c) fail(std::string("expected ") + what + " at byte " + std::to_string(offset_ + pos_ - (got >= 0)));
  }
  // The length of the JSON value at pos() (at most `limit` bytes), without consuming it.
  // Strings are skipped with memchr to their closing quote (one not escaped by an odd run
  // of backslashes); the rest byte by byte over what is buffered.
  size_t extent(size_t limit) {
    size_t i = 0;
    int depth = 0;
    bool in_string = false;
    for (;;) {
      if (i >= limit) fail("has a value larger than " + std::to_string(limit) + " bytes at byte " + at());
      if (i >= end_ - pos_ && !have(i + 1)) {
        if (depth == 0 && !in_string && i > 0) return i;  // a scalar at the very end
        fail("ends in the middle of a value (truncated?) at byte " + at());
      }
      const char* p = buf_.data() + pos_;
      const size_t avail = std::min(end_ - pos_, limit);
      while (i < avail) {
        if (in_string) {
          const void* q = std::memchr(p + i, '"', avail - i);
          if (q == nullptr) {
            i = avail;
            break;
          }
          const size_t at_quote = static_cast<size_t>(static_cast<const char*>(q) - p);
          size_t slashes = 0;
          while (slashes < at_quote && p[at_quote - 1 - slashes] == '\\') ++slashes;
          i = at_quote + 1;
          if (slashes % 2 == 1) continue;  // an escaped quote
          in_string = false;
          if (depth == 0) return i;
          continue;
        }
        const char c = p[i];
        if (c == '"') {
          in_string = true;
        } else if (c == '{' || c == '[') {
          if (++depth > kMaxDepth) fail("nests deeper than " + std::to_string(kMaxDepth) + " levels at byte " + at());
        } else if (c == '}' || c == ']') {
          if (depth == 0) return i;  // the end of an enclosing container: a scalar ended
          if (--depth == 0) return i + 1;
        } else if (depth == 0 && (c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t')) {
          return i;
        }
        ++i;
      }
    }
  }
  // A key: a short string, returned raw (keys we look for have no escapes).
  std::string key() {
    skip_ws();
    if (peek() != '"') fail("expected a key at byte " + at());
    const size_t n = extent(4096);
    std::string k(buf_.data() + pos_ + 1, n >= 2 ? n - 2 : 0);
    pos_ += n;
    return k;
  }
  const char* data() const { return buf_.data() + pos_; }
  size_t capacity_from_pos() const { return buf_.size() - pos_; }
  void advance(size_t n) { pos_ += n; }
  std::string at() const { return std::to_string(offset_ + pos_); }
  [[noreturn]] void fail(const std::string& what) const {
    DPB_FAIL() << "trace '" << escape_untrusted(path_) << "' " << what
               << " (write traces with torch.profiler's export_chrome_trace or tensorboard_trace_handler)";
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0;
  uint64_t offset_ = 0;
  bool eof_ = false;
};

// What one event says, as far as the analyses care.
struct Event {
  std::string_view ph, cat, name;
  double ts = NAN, dur = NAN;
  int64_t pid = -1, tid = 0;
  bool pid_known = false;
  int64_t device = -1, stream = -1, correlation = -1, bytes = -1;
};

// Reads a value of the type asked for; false (leaving `out` alone) otherwise.
template <typename T>
bool take(simdjson::simdjson_result<T> r, T* out) {
  return !std::move(r).get(*out);
}

bool read_int(sj::value v, int64_t* out) {
  int64_t i = 0;
  if (!v.get_int64().get(i)) {
    *out = i;
    return true;
  }
  double d = 0;
  if (!v.get_double().get(d) && std::isfinite(d) && std::fabs(d) < 9e18) {
    *out = static_cast<int64_t>(d);
    return true;
  }
  std::string_view s;  // some exporters write ids as strings
  if (!v.get_string().get(s)) {
    int64_t x = 0;
    for (char c : s) {
      if (c < '0' || c > '9' || x > (INT64_MAX - 9) / 10) return false;
      x = x * 10 + (c - '0');
    }
    *out = x;
    return !s.empty();
  }
  return false;
}

class Builder {
 public:
  explicit Builder(KinetoTrace& out) : out_(out) {}

  void event(Input& in, size_t len) {
    sj::document doc;
    if (parser_.iterate(in.data(), len, in.capacity_from_pos()).get(doc)) in.fail("has an event that is not JSON at byte " + in.at());
    sj::object obj;
    if (doc.get_object().get(obj)) return;  // not an object: nothing of ours
    Event e;
    for (auto field : obj) {
      std::string_view k;
      if (field.unescaped_key().get(k)) in.fail("has a malformed key at byte " + in.at());
      sj::value v;
      if (field.value().get(v)) in.fail("has a malformed value at byte " + in.at());
      if (k == "ph") take(v.get_string(), &e.ph);
      else if (k == "cat") take(v.get_string(), &e.cat);
      else if (k == "name") take(v.get_string(), &e.name);
      else if (k == "ts") take(v.get_double(), &e.ts);
      else if (k == "dur") take(v.get_double(), &e.dur);
      else if (k == "pid") e.pid_known = read_int(v, &e.pid);
      else if (k == "tid") (void)read_int(v, &e.tid);
      else if (k == "args") args(v, e);
    }
    // The string views are valid here: simdjson unescapes strings into its own buffer,
    // which lives until the next event is parsed.
    keep(in, e);
  }

 private:
  void args(sj::value v, Event& e) {
    sj::object a;
    if (v.get_object().get(a)) return;
    for (auto f : a) {
      std::string_view k;
      if (f.unescaped_key().get(k)) return;
      sj::value x;
      if (f.value().get(x)) return;
      if (k == "device") (void)read_int(x, &e.device);
      else if (k == "stream") (void)read_int(x, &e.stream);
      else if (k == "correlation") (void)read_int(x, &e.correlation);
      else if (k == "bytes") (void)read_int(x, &e.bytes);
    }
  }

  int64_t ns(Input& in, double micros) {
    if (!std::isfinite(micros) || std::fabs(micros) > kMaxMicros) in.fail("has a time out of range at byte " + in.at());
    return static_cast<int64_t>(std::llround(micros * 1e3));
  }

  void keep(Input& in, const Event& e) {
    if (e.ph != "X" || std::isnan(e.ts)) return;
    if (std::isnan(e.dur) || e.dur < 0) return;
    auto& t = out_.timeline;
    const std::string cat = lower(e.cat);
    const int64_t begin = ns(in, e.ts), end = begin + ns(in, e.dur);
    if (++kept_ > kMaxKept) in.fail("has more than " + std::to_string(kMaxKept) + " events the analyses would keep");
    if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "memcpy" || cat == "memset") {
      trace::DeviceWork w;
      w.device = static_cast<int>(std::clamp<int64_t>(e.device >= 0 ? e.device : (e.pid_known ? e.pid : 0), 0, 1 << 20));
      w.stream = e.stream >= 0 ? e.stream : e.tid;
      w.begin_ns = begin;
      w.end_ns = end;
      w.correlation = e.correlation;
      w.name = t.names.intern(e.name);
      const bool copy = cat != "kernel";
      w.work = copy ? trace::Work::memory : trace::classify_kernel(e.name);
      if (copy) {
        w.bytes = e.bytes;
        if (starts_with(e.name, "Memset") || cat.find("memset") != std::string::npos) w.copy = trace::CopyKind::memset;
        else if (e.name.find("HtoD") != std::string_view::npos) w.copy = trace::CopyKind::h2d;
        else if (e.name.find("DtoH") != std::string_view::npos) w.copy = trace::CopyKind::d2h;
        else if (e.name.find("DtoD") != std::string_view::npos) w.copy = trace::CopyKind::d2d;
        else if (e.name.find("PtoP") != std::string_view::npos) w.copy = trace::CopyKind::p2p;
        else w.copy = trace::CopyKind::other;
        if (e.name.find("Pageable") != std::string_view::npos) w.pinned = 0;
        else if (e.name.find("Pinned") != std::string_view::npos) w.pinned = 1;
      }
      t.work.push_back(w);
      return;
    }
    if (cat == "cuda_runtime" || cat == "cuda_driver" || cat == "runtime") {
      t.calls.push_back({e.correlation, begin, end, trace::classify_runtime_call(e.name), t.names.intern(e.name), e.tid});
      return;
    }
    if (cat == "gpu_user_annotation") return;  // the device's copy of the annotations
    if (starts_with(e.name, "ProfilerStep#")) {
      t.steps.emplace_back(begin, end);
    } else if (starts_with(e.name, "enumerate(DataLoader)#") && e.name.find("__next__") != std::string_view::npos) {
      t.data_waits.emplace_back(begin, end);
    } else if (e.name == "DataParallel.forward") {
      ++t.dp_forwards;
    } else if (cat == "cpu_op" && starts_with(e.name, "aten::")) {
      t.ops.push_back({begin, end, t.names.intern(e.name), e.tid});
    }
    if ((cat == "cpu_op" || cat == "user_annotation") && e.pid_known && out_.process < 0) out_.process = e.pid;
  }

  KinetoTrace& out_;
  sj::parser parser_;
  size_t kept_ = 0;
};

// A top-level value we read whole: distributedInfo, deviceProperties.
void top_level(Input& in, const std::string& key, size_t len, KinetoTrace& out) {
  if (key != "distributedInfo" && key != "deviceProperties") return;
  sj::parser parser;
  sj::document doc;
  if (parser.iterate(in.data(), len, in.capacity_from_pos()).get(doc)) in.fail("has a malformed " + key);
  if (key == "deviceProperties") {
    sj::array a;
    if (doc.get_array().get(a)) return;
    size_t n = 0;
    if (a.count_elements().get(n)) in.fail("has a malformed deviceProperties");
    out.timeline.visible_devices = static_cast<int>(std::min<size_t>(n, 1 << 16));
    return;
  }
  sj::object o;
  if (doc.get_object().get(o)) return;
  for (auto f : o) {
    std::string_view k;
    if (f.unescaped_key().get(k)) return;
    sj::value v;
    if (f.value().get(v)) return;
    int64_t x = 0;
    if (k == "rank" && read_int(v, &x) && x >= 0 && x < (1 << 20)) out.timeline.rank = static_cast<int>(x);
    if (k == "world_size" && read_int(v, &x) && x >= 1 && x <= (1 << 20)) out.timeline.world = static_cast<int>(x);
  }
}

void event_array(Input& in, Builder& b) {
  in.skip_ws();
  if (in.peek() == ']') {
    in.get();
    return;
  }
  for (;;) {
    in.skip_ws();
    const size_t n = in.extent(kMaxEvent);
    b.event(in, n);
    in.advance(n);
    in.skip_ws();
    const int c = in.get();
    if (c == ']') return;
    if (c < 0) in.fail("ends in the middle of its event list (truncated?)");
    if (c != ',') in.fail("has a malformed event list at byte " + in.at());
  }
}

}  // namespace

std::pair<std::string, int64_t> host_from_file_name(const std::string& path) {
  std::string base = std::filesystem::path(path).filename().string();
  for (const char* ext : {".gz", ".json", ".trace", ".pt"})
    if (base.size() > std::strlen(ext) && base.compare(base.size() - std::strlen(ext), std::strlen(ext), ext) == 0)
      base.resize(base.size() - std::strlen(ext));
  const auto dot = base.rfind('.');  // "{worker}.{time}"
  if (dot == std::string::npos) return {"", -1};
  const std::string worker = base.substr(0, dot), time = base.substr(dot + 1);
  if (time.empty() || !std::all_of(time.begin(), time.end(), ::isdigit)) return {"", -1};
  const auto us = worker.rfind('_');
  if (us == std::string::npos || us + 1 >= worker.size()) return {worker, -1};
  const std::string pid = worker.substr(us + 1);
  if (pid.size() > 9 || !std::all_of(pid.begin(), pid.end(), ::isdigit)) return {worker, -1};
  return {worker.substr(0, us), std::stoll(pid)};
}

KinetoTrace read_kineto_trace(const std::string& path) {
  DPB_CHECK(std::filesystem::is_regular_file(path)) << "trace '" << escape_untrusted(path) << "' does not exist";
  KinetoTrace out;
  out.path = path;
  out.timeline.source = path;
  const auto [host, pid] = host_from_file_name(path);
  out.timeline.host = host;
  Input in(path);
  Builder builder(out);
  in.skip_ws();
  const int first = in.get();
  if (first == '[') {  // the bare event array of a PyTorch without Kineto
    event_array(in, builder);
  } else if (first == '{') {
    bool events = false;
    in.skip_ws();
    if (in.peek() == '}') in.fail("has no traceEvents");
    for (;;) {
      const std::string key = in.key();
      in.expect(':', "':'");
      in.skip_ws();
      if (key == "traceEvents") {
        in.expect('[', "the traceEvents list");
        event_array(in, builder);
        events = true;
      } else {
        const size_t n = in.extent(kMaxEvent);
        top_level(in, key, n, out);
        in.advance(n);
      }
      in.skip_ws();
      const int c = in.get();
      if (c == '}') break;
      if (c < 0) in.fail("ends before its closing brace (truncated?)");
      if (c != ',') in.fail("is not a JSON object (at byte " + in.at() + ")");
    }
    if (!events) in.fail("has no traceEvents");
  } else {
    in.fail("is not a PyTorch profiler trace (neither a JSON object nor an event list)");
  }
  in.skip_ws();
  if (in.peek() >= 0) in.fail("has data after its end at byte " + in.at());
  if (out.process < 0) out.process = pid;
  auto& t = out.timeline;
  std::sort(t.steps.begin(), t.steps.end());
  DPB_CHECK(!t.work.empty() || !t.steps.empty())
      << "trace '" << escape_untrusted(path) << "' has neither GPU activity nor profiler steps (profile with "
      << "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and call prof.step() every iteration)";
  return out;
}

namespace {

std::vector<std::string> expand(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    if (!std::filesystem::is_directory(p)) {
      files.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& entry : std::filesystem::directory_iterator(p)) {
      const std::string name = entry.path().filename().string();
      const bool json = name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
      const bool gz = name.size() > 8 && name.compare(name.size() - 8, 8, ".json.gz") == 0;
      if (entry.is_regular_file() && (json || gz)) found.push_back(entry.path().string());
    }
    DPB_CHECK(!found.empty()) << "no trace (*.json, *.json.gz) in directory '" << escape_untrusted(p) << "'";
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

// Appends `b`'s events to `a` (another file of the same process).
void append(trace::RankTimeline& a, trace::RankTimeline&& b) {
  auto rename = [&](uint32_t id) { return a.names.intern(b.names.name(id)); };
  for (auto w : b.work) {
    w.name = rename(w.name);
    a.work.push_back(w);
  }
  for (auto c : b.calls) {
    c.name = rename(c.name);
    a.calls.push_back(c);
  }
  for (auto o : b.ops) {
    o.name = rename(o.name);
    a.ops.push_back(o);
  }
  a.steps.insert(a.steps.end(), b.steps.begin(), b.steps.end());
  std::sort(a.steps.begin(), a.steps.end());
  a.data_waits.insert(a.data_waits.end(), b.data_waits.begin(), b.data_waits.end());
  a.dp_forwards += b.dp_forwards;
  a.world = std::max(a.world, b.world);
  a.visible_devices = std::max(a.visible_devices, b.visible_devices);
  a.source += ", " + b.source;
}

// The files read side by side, a thread per core; the first file's error (in file order)
// is the one raised.
std::vector<KinetoTrace> read_all(const std::vector<std::string>& files) {
  std::vector<KinetoTrace> traces(files.size());
  std::vector<std::exception_ptr> errors(files.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < files.size();) {
      try {
        traces[i] = read_kineto_trace(files[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  const size_t n = std::min<size_t>(files.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t k = 1; k < n; ++k) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  return traces;
}

}  // namespace

std::vector<trace::RankTimeline> read_kineto_ranks(const std::vector<std::string>& paths) {
  DPB_CHECK(!paths.empty()) << "no profiler trace given";
  // One process: the same rank, or (without distributedInfo) the same host and process.
  std::map<std::string, trace::RankTimeline> by_process;
  std::map<std::string, std::pair<std::string, int64_t>> who;  // the host and process each key came from
  const std::vector<std::string> files = expand(paths);
  std::vector<KinetoTrace> traces = read_all(files);
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& f = files[i];
    KinetoTrace& t = traces[i];
    const std::string key = t.timeline.rank ? "rank " + std::to_string(*t.timeline.rank)
                                            : "process " + t.timeline.host + "/" + std::to_string(t.process);
    const std::pair<std::string, int64_t> process{t.timeline.host, t.process};
    auto it = by_process.find(key);
    if (it == by_process.end()) {
      who[key] = process;
      by_process.emplace(key, std::move(t.timeline));
      continue;
    }
    // The same rank from another host, or another process on the same host: two jobs.
    const auto& first = who[key];
    const bool other_host = !first.first.empty() && !process.first.empty() && first.first != process.first;
    const bool other_process = first.first == process.first && first.second >= 0 && process.second >= 0 &&
                               first.second != process.second;
    DPB_CHECK(!other_host && !other_process)
        << "traces '" << escape_untrusted(it->second.source) << "' and '" << escape_untrusted(f)
        << "' come from two processes (" << escape_untrusted(first.first) << " pid " << first.second << ", "
        << escape_untrusted(process.first) << " pid " << process.second << ") that both say they are "
        << key << ": give the traces of one job";
    append(it->second, std::move(t.timeline));
  }
  std::vector<trace::RankTimeline> ranks;
  for (auto& [key, t] : by_process) ranks.push_back(std::move(t));
  // Ranks in numerical order; processes that do not say theirs after them, in file order.
  std::stable_sort(ranks.begin(), ranks.end(), [](const trace::RankTimeline& a, const trace::RankTimeline& b) {
    return a.rank.value_or(INT32_MAX) < b.rank.value_or(INT32_MAX);
  });
  for (size_t i = 1; i < ranks.size(); ++i)
    DPB_CHECK(!ranks[i].rank || ranks[i].rank != ranks[i - 1].rank) << "two processes both say they are rank " << *ranks[i].rank;
  return ranks;
}

}  // namespace dpb::doctor
