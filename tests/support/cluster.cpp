#include "tests/support/cluster.h"

#include <unistd.h>

#include "tests/support/process.h"

namespace dpb::test {

std::string shell_quote(const std::string& text) {
  std::string q = "'";
  for (char c : text) {
    if (c == '\'') q.append("'\\''");
    else q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

// "t" and this process's id: short enough for interface names, unique while it runs.
std::string cluster_name() {
  std::string name = std::to_string(::getpid() % 10000000);
  name.insert(name.begin(), 't');
  return name;
}

Cluster::Cluster(int nodes, const std::string& rate) : name_(cluster_name()), nodes_(nodes) {
  if (::geteuid() != 0) {
    why_ = "nodes in one box need root (network namespaces)";
    return;
  }
  const Proc r = run_command(script("up " + std::to_string(nodes) + (rate.empty() ? "" : " --rate=" + rate)));
  if (r.code != 0) why_ = "scripts/cluster.sh up failed: " + r.err;
}

Cluster::~Cluster() {
  if (available()) run_command(script("down"));
}

std::string Cluster::script(const std::string& args) const {
  return "DPB_CLUSTER=" + name_ + " DPB_CLUSTER_OWNER=" + std::to_string(::getpid()) + " " DPB_SOURCE_DIR
         "/scripts/cluster.sh " + args;
}

std::string Cluster::addr(int node) const { return "10.99.0." + std::to_string(node + 1); }

std::string Cluster::on(int node, const std::string& command) const {
  return script("run " + std::to_string(node) + " -- sh -c " + shell_quote(command));
}

bool Cluster::rate(int node, const std::string& rate) const {
  return run_command(script("rate " + std::to_string(node) + " " + rate)).code == 0;
}

bool Cluster::link(int node, bool up) const {
  return run_command(script("link " + std::to_string(node) + (up ? " up" : " down"))).code == 0;
}

}  // namespace dpb::test
