#pragma once
// The TCP store's wire format, parsed without trusting the bytes (tcp_store.h serves it;
// tests/fuzz feeds it garbage). A request is
//   [op u8][key length u32 LE][key][value length u32 LE][value]
// A connection's first request is HELLO with key "dpbench-store/1" and the job's token
// as value; the server answers one byte (1) or closes the connection.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dpb::comm::wire {

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kCheck = 4, kHello = 5 };

inline constexpr std::string_view kHelloKey = "dpbench-store/1";
inline constexpr size_t kMaxKey = 4096;           // keys are short names
inline constexpr size_t kMaxValue = 16u << 20;    // values: addresses, ids, ranks' metrics
inline constexpr size_t kMaxRequest = 1 + 4 + kMaxKey + 4 + kMaxValue;
inline constexpr size_t kMaxToken = 4096;         // DPB_STORE_TOKEN

struct Request {
  Op op = kSet;
  std::string key, value;
};

enum class Parse { need_more, bad, done };

// Parses the request at the front of `buf`: done (with its length in *used), need_more
// (a prefix of a valid request), or bad (an unknown op or a length over the bounds;
// *why says which).
Parse parse_request(std::string_view buf, Request* out, size_t* used, std::string* why);

// A request's bytes.
std::string encode_request(Op op, std::string_view key, std::string_view value);

// The new value of ADD: `current` (empty: 0) plus `delta`, both decimal int64; false on
// anything else, or overflow.
bool add_decimal(std::string_view current, std::string_view delta, int64_t* result);

}  // namespace dpb::comm::wire
