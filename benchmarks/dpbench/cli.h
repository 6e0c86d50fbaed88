#pragma once
// dpbench's command line: every flag, its help and its valid values (CLI11), turned
// once into typed options (options.h) and checked before any work; then handed to
// launch.h, which decides what this process runs.
#include <string>
#include <vector>

#include "benchmarks/dpbench/options.h"

namespace dpb::bench {

// Parses argv, runs, returns the process exit code. Errors are one line on stderr.
int main_cli(int argc, char** argv);

// The options of a command line (args[0]: the program), converted and typed but not yet
// validated against the machine. Throws CLI::ParseError or dpb::Error.
BenchOptions parse_options(const std::vector<std::string>& args);

// "4" or "1,2,4": device counts, each 1..64, increasing. A dpb::Error otherwise.
std::vector<int> parse_gpus(const std::string& text);
// --simulate's counts: "2,4,8" (increasing) or "2..1024" (doubling from the first, the
// last included), each 1..1048576. A dpb::Error otherwise.
std::vector<int> parse_rank_counts(const std::string& text);

// RANK:N (two whole numbers, RANK >= 0, N > 0) from a flag such as --straggler=1:30;
// `form` names them in the error (RANK:MS).
std::pair<int, int64_t> parse_rank_and_count(const std::string& text, const char* flag, const char* form,
                                             const char* example);

}  // namespace dpb::bench
