#pragma once
// This node's addresses as the other nodes see them. A rank tells the others where to
// reach it (Gloo's listening address, NCCL's bootstrap interface); the name the host
// calls itself is no guide (Debian maps it to 127.0.1.1, a container may not resolve it
// at all), so the address is the one the kernel's routing picks to reach MASTER_ADDR,
// or the interface GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME names.
#include <string>
#include <vector>

namespace dpb::comm {

struct LocalAddress {
  std::string address;    // numeric ("10.0.0.1", "fd00::2")
  std::string interface;  // the interface it is on ("eth0"); empty where none holds it
  std::string why;        // how it was chosen, for the log
};

// The numeric addresses `host` resolves to (IPv4 first); empty when it does not resolve.
std::vector<std::string> resolve_addresses(const std::string& host);

// The address this node sends from to reach `host` (the routing table's choice; a UDP
// socket is connected, nothing is sent). dpb::Error naming `host` when it does not
// resolve or no route leads there.
LocalAddress address_toward(const std::string& host);

// The address of interface `name` (IPv4 first). dpb::Error naming the interfaces there
// are when it has none or does not exist.
LocalAddress interface_address(const std::string& name);

// The interface that holds numeric `address` on this node; empty when none does.
std::string interface_holding(const std::string& address);

// "127.x.y.z", "::1" or "localhost".
bool is_loopback_address(const std::string& addr);

}  // namespace dpb::comm
