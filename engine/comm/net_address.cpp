#include "engine/comm/net_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "engine/core/error.h"
#include "engine/core/text.h"

namespace dpb::comm {

namespace {

std::string numeric(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  else if (sa->sa_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf));
  return buf;
}

// Every (interface, address) of this node, IPv4 before IPv6; link-local IPv6 left out
// (it needs a scope no peer is given).
std::vector<std::pair<std::string, std::string>> interfaces() {
  std::vector<std::pair<std::string, std::string>> v4, v6;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    if (i->ifa_addr->sa_family == AF_INET) v4.emplace_back(i->ifa_name, numeric(i->ifa_addr));
    else if (i->ifa_addr->sa_family == AF_INET6 &&
             !IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr))
      v6.emplace_back(i->ifa_name, numeric(i->ifa_addr));
  }
  ::freeifaddrs(list);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

}  // namespace

bool is_loopback_address(const std::string& a) { return a == "localhost" || a.rfind("127.", 0) == 0 || a == "::1"; }

std::vector<std::string> resolve_addresses(const std::string& host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  std::vector<std::string> v4, v6;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return {};
  for (addrinfo* a = res; a; a = a->ai_next) {
    const std::string s = numeric(a->ai_addr);
    auto& into = a->ai_family == AF_INET ? v4 : v6;
    if (!s.empty() && std::find(into.begin(), into.end(), s) == into.end()) into.push_back(s);
  }
  ::freeaddrinfo(res);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

std::string interface_holding(const std::string& address) {
  for (const auto& [name, a] : interfaces())
    if (a == address) return name;
  return {};
}

LocalAddress address_toward(const std::string& host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_socktype = SOCK_DGRAM;
  const int rc = ::getaddrinfo(host.c_str(), "9", &hints, &res);
  DPB_CHECK(rc == 0) << "cannot resolve MASTER_ADDR '" << escape_untrusted(host) << "' to find the address the "
                     << "other nodes reach this one at: " << gai_strerror(rc);
  std::string why_not;
  LocalAddress out;
  for (addrinfo* a = res; a && out.address.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage self{};
    socklen_t len = sizeof(self);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) == 0)
      out.address = numeric(reinterpret_cast<sockaddr*>(&self));
    else
      why_not = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  DPB_CHECK(!out.address.empty()) << "no route from this node to MASTER_ADDR '" << escape_untrusted(host)
                                  << "' (" << why_not << "): the other nodes could not be reached either";
  out.interface = interface_holding(out.address);
  out.why = "the address this node reaches MASTER_ADDR " + host + " from" +
            (out.interface.empty() ? "" : " (" + out.interface + ")");
  return out;
}

LocalAddress interface_address(const std::string& name) {
  std::set<std::string> names;
  for (const auto& [n, a] : interfaces()) {
    if (n == name) return {a, n, "interface " + n};
    names.insert(n);
  }
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  DPB_FAIL() << "interface '" << escape_untrusted(name) << "' has no address on this node (interfaces that are up "
             << "with one: " << (list.empty() ? "none" : list) << ")";
}

}  // namespace dpb::comm
