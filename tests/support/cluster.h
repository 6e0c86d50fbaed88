#pragma once
// Nodes in one box for the tests (scripts/cluster.sh): network namespaces, each a node
// with its own address and host name, joined by a switch with a rate cap per link. Up in
// the constructor, down in the destructor (and reaped by the next `up` if this process
// was killed before it could). Where this machine cannot make namespaces (not root, no
// `ip`), available() is false and why() says so, for GTEST_SKIP.
#include <string>

namespace dpb::test {

class Cluster {
 public:
  explicit Cluster(int nodes, const std::string& rate = "");
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  bool available() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  int nodes() const { return nodes_; }
  std::string addr(int node) const;  // "10.99.0.(node+1)"
  std::string netns(int node) const { return name_ + "-n" + std::to_string(node); }  // its namespace
  // A shell command line that runs `command` (itself a shell command line, quoted here)
  // on `node`.
  std::string on(int node, const std::string& command) const;
  // Node `node`'s link: a new rate cap, or cut / restored. False when the fixture failed.
  bool rate(int node, const std::string& rate) const;
  bool link(int node, bool up) const;

 private:
  std::string script(const std::string& args) const;
  std::string name_;
  int nodes_;
  std::string why_;
};

// `text` single-quoted for sh.
std::string shell_quote(const std::string& text);

}  // namespace dpb::test
