#include "benchmarks/dpbench/cli.h"

int main(int argc, char** argv) { return dpb::bench::main_cli(argc, argv); }
