#include "diagnostics/dpdoctor/kineto_reader.h"

#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <thread>

#include "diagnostics/dpdoctor/json_stream.h"
#include "engine/core/error.h"
#include "engine/core/text.h"

namespace dpb::doctor {

namespace {

namespace sj = simdjson::ondemand;

// Bounds against hostile input, far above what real traces hold: the largest event of the
// public corpus (tests/data/traces/public, PyTorch 1.8 to 2.x) is 5.5 KB, the deepest
// nesting 7 levels, the most events in one file 112 thousand (a long profile holds a few
// million). A file beyond them is refused with its byte offset, never half-read.
constexpr size_t kMaxEvent = size_t{64} << 20;  // one event, or one top-level value we read
constexpr size_t kMaxKept = size_t{40} << 20;   // events kept per file (about 1.6 GB of timeline)
// A time must fit int64 nanoseconds: epoch microseconds up to the year 2262. Real traces
// hold 1.6e15 to 1.8e15 (2020-2027) or relative times far below.
constexpr int64_t kMaxMicros = std::numeric_limits<int64_t>::max() / 1000 - 1;
constexpr const char* kHint = "write traces with torch.profiler's export_chrome_trace or tensorboard_trace_handler";

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }


// What one event says, as far as the analyses care.
struct Event {
  std::string_view ph, cat, name;
  bool has_ts = false, has_dur = false;
  int64_t ts = 0, dur = 0;  // ns
  int64_t pid = -1, tid = 0;
  bool pid_known = false;
  int64_t device = -1, stream = -1, correlation = -1, bytes = -1;
  // record_shapes: the bytes of the inputs whose shape and type were recorded (-1: none).
  int64_t input_bytes = -1;
  // record_param_comms (PyTorch 2.x): the collective and its input's elements and type.
  std::string_view collective_name, dtype;
  int64_t in_nelems = -1;
};

// Bytes per element of a type as PyTorch's record_shapes ("float", "c10::BFloat16") or
// record_param_comms ("Float", "BFloat16") writes it; 0 for what is no tensor type.
int64_t element_bytes(std::string_view type) {
  const std::string t = ascii_lower(type);
  if (t == "float" || t == "int" || t == "unsigned int" || t == "float32" || t == "int32") return 4;
  if (t == "double" || t == "long int" || t == "long" || t == "int64" || t == "float64" || t == "c10::complex<float>")
    return 8;
  if (t == "c10::half" || t == "c10::bfloat16" || t == "half" || t == "bfloat16" || t == "short int" ||
      t == "short" || t == "int16" || t == "float16")
    return 2;
  if (t == "bool" || t == "unsigned char" || t == "signed char" || t == "char" || t == "byte" || t == "int8" ||
      t == "uint8" || starts_with(t, "c10::float8"))
    return 1;
  return 0;
}

// The collective a host annotation names: "nccl:all_reduce", "gloo:_allgather_base",
// record_param_comms' "allreduce", "_reduce_scatter_base", ...
trace::CollectiveKind host_collective_kind(std::string_view op) {
  std::string o;
  for (char c : ascii_lower(op))
    if (c != '_') o += c;
  if (o == "allreduce" || o == "allreducecoalesced") return trace::CollectiveKind::all_reduce;
  if (o == "allgather" || o == "allgatherbase" || o == "allgatherintotensorcoalesced" || o == "allgathercoalesced")
    return trace::CollectiveKind::all_gather;
  if (o == "reducescatter" || o == "reducescatterbase" || o == "reducescattertensorcoalesced")
    return trace::CollectiveKind::reduce_scatter;
  if (o == "broadcast") return trace::CollectiveKind::broadcast;
  if (o == "reduce") return trace::CollectiveKind::reduce;
  if (o == "alltoall" || o == "alltoallbase") return trace::CollectiveKind::all_to_all;
  if (o == "send" || o == "recv" || o == "sendrecv") return trace::CollectiveKind::send_recv;
  return trace::CollectiveKind::other;
}

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

enum class Time { ok, absent, out_of_range };

// A time in microseconds, as decimal text ("1694128201426556", "5590677563691.019",
// "1.5e3"), to nanoseconds: the integer and the first three fraction digits exactly, the
// rest rounded. Not a number (null, a word): absent.
Time micros_text_to_ns(std::string_view s, int64_t* ns) {
  size_t i = 0;
  const bool negative = i < s.size() && s[i] == '-';
  if (negative) ++i;
  const size_t digits_at = i;
  int64_t whole = 0;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
    if (whole > kMaxMicros / 10) return Time::out_of_range;
    whole = whole * 10 + (s[i] - '0');
  }
  if (i == digits_at) return Time::absent;
  int64_t frac = 0;
  int frac_digits = 0;
  bool round_up = false;
  if (i < s.size() && s[i] == '.') {
    for (++i; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i, ++frac_digits) {
      if (frac_digits < 3) frac = frac * 10 + (s[i] - '0');
      else if (frac_digits == 3) round_up = s[i] >= '5';
    }
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {  // an exponent: rare, read as a double
    const double d = std::strtod(std::string(s).c_str(), nullptr);
    if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(kMaxMicros)) return Time::out_of_range;
    *ns = static_cast<int64_t>(std::llround(d * 1e3));
    return Time::ok;
  }
  while (frac_digits < 3) {
    frac *= 10;
    ++frac_digits;
  }
  if (whole > kMaxMicros) return Time::out_of_range;
  const int64_t v = whole * 1000 + frac + (round_up ? 1 : 0);
  *ns = negative ? -v : v;
  return Time::ok;
}

Time micros_to_ns(sj::value v, int64_t* ns) {
  std::string_view text;
  if (!v.get_string().get(text)) return micros_text_to_ns(text, ns);  // a number written as a string
  sj::json_type type;
  if (v.type().get(type) || type != sj::json_type::number) return Time::absent;
  return micros_text_to_ns(v.raw_json_token(), ns);
}

class Builder {
 public:
  explicit Builder(KinetoTrace& out) : out_(out) {}

  void event(JsonStream& in, size_t len) {
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
      else if (k == "ts") e.has_ts = time(in, v, &e.ts, "time");
      else if (k == "dur") e.has_dur = time(in, v, &e.dur, "duration");
      else if (k == "pid") e.pid_known = read_int(v, &e.pid);
      else if (k == "tid") (void)read_int(v, &e.tid);
      else if (k == "args") args(v, e);
    }
    // The string views are valid here: simdjson unescapes strings into its own buffer,
    // which lives until the next event is parsed.
    keep(in, e);
  }

 private:
  bool time(JsonStream& in, sj::value v, int64_t* ns, const char* what) {
    const Time t = micros_to_ns(v, ns);
    if (t == Time::out_of_range)
      in.fail(std::string("has a ") + what + " out of range (beyond what int64 nanoseconds hold, the year 2262) at byte " +
              in.at());
    return t == Time::ok;
  }

  void args(sj::value v, Event& e) {
    numels_.clear();
    types_.clear();
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
      else if (k == "Input Dims") input_dims(x);
      else if (k == "Input type") input_types(x);
      else if (k == "Collective name") (void)take(x.get_string(), &e.collective_name);
      else if (k == "In msg nelems") (void)read_int(x, &e.in_nelems);
      else if (k == "dtype") (void)take(x.get_string(), &e.dtype);
    }
    // The shapes and the types are two lists side by side, in either order.
    if (!numels_.empty() && types_.size() == numels_.size()) {
      int64_t total = 0;
      bool any = false;
      for (size_t i = 0; i < numels_.size(); ++i) {
        const int64_t b = element_bytes(types_[i]);
        if (b == 0 || numels_[i] < 0) continue;
        int64_t x = 0;
        if (__builtin_mul_overflow(numels_[i], b, &x) || __builtin_add_overflow(total, x, &total)) return;
        any = true;
      }
      if (any) e.input_bytes = total;
    }
  }

  // "Input Dims": [[d0, d1, ...], [], ...]: each input's element count (-1: not a tensor).
  void input_dims(sj::value v) {
    numels_.clear();
    sj::array a;
    if (v.get_array().get(a)) return;
    for (auto item : a) {
      sj::array dims;
      sj::value iv;
      if (item.get(iv) || iv.get_array().get(dims)) {
        numels_.push_back(-1);
        continue;
      }
      int64_t n = 1;
      size_t count = 0;
      for (auto d : dims) {
        sj::value dv;
        int64_t x = 0;
        if (d.get(dv) || !read_int(dv, &x) || x < 0 || __builtin_mul_overflow(n, x, &n)) {
          n = -1;
          break;
        }
        ++count;
      }
      numels_.push_back(count == 0 ? -1 : n);  // [] is a scalar or a list: no tensor's shape
    }
  }

  void input_types(sj::value v) {
    sj::array a;
    if (v.get_array().get(a)) return;
    for (auto item : a) {
      std::string_view t;
      sj::value iv;
      types_.emplace_back(item.get(iv) || iv.get_string().get(t) ? std::string() : std::string(t.substr(0, 64)));
    }
  }

  void keep(JsonStream& in, const Event& e) {
    if (e.ph != "X" || !e.has_ts || !e.has_dur || e.dur < 0) return;
    auto& t = out_.timeline;
    const std::string cat = ascii_lower(e.cat);
    const int64_t begin = e.ts;
    int64_t end = 0;
    if (__builtin_add_overflow(begin, e.dur, &end)) in.fail("has an event that ends beyond what int64 nanoseconds hold at byte " + in.at());
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
    const bool host = cat == "cpu_op" || cat == "operator" || cat == "user_annotation" || cat == "python_function";
    if (host && e.pid_known && out_.process < 0) out_.process = e.pid;
    if (host) collective(e, begin, end);
    if (starts_with(e.name, "ProfilerStep#")) {
      t.steps.emplace_back(begin, end);
      const std::string_view number = e.name.substr(13);
      int n = -1;
      if (!number.empty() && number.size() < 10 &&
          std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        n = std::stoi(std::string(number));
        if (t.first_step_number < 0 || n < t.first_step_number) t.first_step_number = n;
      }
      t.step_numbers.push_back(n);
    } else if (starts_with(e.name, "enumerate(DataLoader)#") && e.name.find("__next__") != std::string_view::npos) {
      t.data_waits.emplace_back(begin, end);
    } else if (e.name == "DataParallel.forward") {
      ++t.dp_forwards;
    } else if (e.name == "DistributedDataParallel.forward") {
      ++t.ddp_forwards;
    } else if (starts_with(e.name, "FSDP::") || e.name == "FullyShardedDataParallel.forward") {
      ++t.fsdp_ops;
    } else if (starts_with(e.name, "Optimizer.step#") || starts_with(e.name, "Optimizer.zero_grad#")) {
      if (starts_with(e.name, "Optimizer.step#")) t.optimizer_steps.emplace_back(begin, end);
      t.ops.push_back({begin, end, t.names.intern(e.name), e.tid, trace::HostOpKind::optimizer});
    } else if (cat == "cpu_op" || cat == "operator") {
      if (starts_with(e.name, "_c10d_functional::")) ++t.functional_collectives;
      if (e.name == "torch::autograd::AccumulateGrad" && e.input_bytes > 0)
        t.gradients.push_back({begin, end, e.tid, e.input_bytes});
      t.ops.push_back({begin, end, t.names.intern(e.name), e.tid, trace::HostOpKind::op});
    } else if (cat == "python_function") {
      t.ops.push_back({begin, end, t.names.intern(e.name), e.tid, trace::HostOpKind::python});
    }
  }

  // A collective the host issued: "nccl:OP" / "gloo:OP" (ProcessGroupNCCL's and
  // ProcessGroupGloo's record_function, with the input's shape under record_shapes), or a
  // record_param_comms that names its collective and message size. Both may stand for one
  // call: the record_function is kept where the file has one (annotated_).
  void collective(const Event& e, int64_t begin, int64_t end) {
    auto& t = out_.timeline;
    const bool annotated = starts_with(e.name, "nccl:") || starts_with(e.name, "gloo:");
    if (annotated) {
      const trace::CollectiveKind k = host_collective_kind(e.name.substr(5));
      if (k == trace::CollectiveKind::other) return;
      if (!annotated_) {  // the first record_function: drop what record_param_comms gave
        annotated_ = true;
        t.collectives.clear();
      }
      t.collectives.push_back({begin, end, e.tid, k, e.input_bytes});
    } else if (!annotated_ && e.name == "record_param_comms" && !e.collective_name.empty()) {
      const trace::CollectiveKind k = host_collective_kind(e.collective_name);
      if (k == trace::CollectiveKind::other) return;
      const int64_t b = element_bytes(e.dtype);
      int64_t bytes = -1;
      if (e.in_nelems >= 0 && b > 0 && __builtin_mul_overflow(e.in_nelems, b, &bytes)) bytes = -1;
      t.collectives.push_back({begin, end, e.tid, k, bytes});
    }
  }

  KinetoTrace& out_;
  sj::parser parser_;
  size_t kept_ = 0;
  bool annotated_ = false;
  std::vector<int64_t> numels_;
  std::vector<std::string> types_;
};

// A top-level value we read whole: distributedInfo, deviceProperties, baseTimeNanoseconds.
void top_level(JsonStream& in, const std::string& key, size_t len, KinetoTrace& out, int64_t* base_ns) {
  if (key != "distributedInfo" && key != "deviceProperties" && key != "baseTimeNanoseconds") return;
  sj::parser parser;
  sj::document doc;
  if (parser.iterate(in.data(), len, in.capacity_from_pos()).get(doc)) in.fail("has a malformed " + key);
  if (key == "baseTimeNanoseconds") {  // a scalar document: read as what it is
    int64_t base = -1;
    uint64_t u = 0;
    if (!doc.get_uint64().get(u) && u <= static_cast<uint64_t>(INT64_MAX)) base = static_cast<int64_t>(u);
    if (base < 0) in.fail("has a baseTimeNanoseconds that is not a count of nanoseconds since the epoch");
    *base_ns = base;
    return;
  }
  if (key == "deviceProperties") {
    sj::array a;
    if (doc.get_array().get(a)) return;
    size_t n = 0;
    if (a.count_elements().get(n)) in.fail("has a malformed deviceProperties");
    out.timeline.visible_devices = static_cast<int>(std::min<size_t>(n, 1 << 16));
    for (auto item : a) {  // the first device's name ("NVIDIA H100 80GB HBM3")
      sj::object d;
      std::string_view name;
      if (!item.get_object().get(d) && !d["name"].get_string().get(name))
        out.timeline.gpu_name = std::string(name.substr(0, 128));
      break;
    }
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
    std::string_view s;
    if (k == "rank" && read_int(v, &x) && x >= 0 && x < (1 << 20)) {
      out.timeline.rank = static_cast<int>(x);
      out.distributed_info = true;
    }
    if (k == "world_size" && read_int(v, &x) && x >= 1 && x <= (1 << 20)) out.timeline.world = static_cast<int>(x);
    if (k == "backend" && !v.get_string().get(s)) out.backend = std::string(s.substr(0, 64));
  }
}

void event_array(JsonStream& in, Builder& b) {
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
  JsonStream in(path, kHint);
  Builder builder(out);
  int64_t base_ns = 0;
  in.skip_ws();
  const int first = in.get();
  if (first == '[') {  // the bare event array of a PyTorch without Kineto, or of the first Kineto
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
        top_level(in, key, n, out, &base_ns);
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
  // Relative times (PyTorch 2.x) count from baseTimeNanoseconds, which may stand after
  // the events.
  if (!t.shift(base_ns))
    in.fail("has times that, added to its baseTimeNanoseconds, leave what int64 nanoseconds hold");
  std::sort(t.steps.begin(), t.steps.end());
  std::sort(t.data_waits.begin(), t.data_waits.end());
  std::sort(t.optimizer_steps.begin(), t.optimizer_steps.end());
  out.span = t.extent();
  DPB_CHECK(!t.work.empty() || !t.steps.empty())
      << "trace '" << escape_untrusted(path) << "' has neither GPU activity nor profiler steps (profile with "
      << "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] and call prof.step() every iteration)";
  return out;
}

std::vector<std::string> trace_files(const std::vector<std::string>& paths) {
  DPB_CHECK(!paths.empty()) << "no profiler trace given";
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

std::vector<KinetoTrace> read_kineto_traces(const std::vector<std::string>& files) {
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

}  // namespace dpb::doctor
