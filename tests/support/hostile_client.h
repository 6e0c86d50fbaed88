#pragma once
// Clients that misbehave against a TCP store at 127.0.0.1:port, for the tests that check
// the store keeps serving its own job: garbage bytes, oversized lengths, a wrong token,
// requests dribbled a byte at a time, and connections that send half a request and stop.
#include <atomic>
#include <string>

namespace dpb::test {

// Runs every kind of misbehaviour in turn against the port until `stop`; returns how many
// hostile connections it made.
int attack_store(int port, const std::atomic<bool>& stop);

// One connection that sends `bytes` (pausing `pause_ms` between bytes when > 0) and
// returns what the server answered before it closed or 300 ms passed.
std::string send_raw(int port, const std::string& bytes, int pause_ms = 0);

// A connection to 127.0.0.1:port that the caller holds (and closes); -1 when refused.
int connect_loopback(int port);

// Whether the server has closed `fd` (EOF or reset) within `ms`.
bool closed_within(int fd, int ms);

}  // namespace dpb::test
