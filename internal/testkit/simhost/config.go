package simhost

import (
	"fmt"
	"net/netip"
)

// MaxHosts bounds Config.Hosts: host addresses are .1 to .MaxHosts of the
// /24, the root namespace takes .254, and interface names must stay within
// the kernel's 15 characters.
const MaxHosts = 250

// Config says what cluster New builds.
type Config struct {
	// Hosts is the number of simulated hosts, 1..MaxHosts. They are named
	// node1..nodeN and get the addresses .1 to .N of the subnet.
	Hosts int
	// Subnet is the IPv4 /24 of the bridge. Zero: New picks one in
	// 10.200.0.0/16-10.249.0.0/16 that overlaps no address or route in the
	// root namespace, starting from a slot derived from the process id so
	// that concurrent users rarely probe the same slot.
	Subnet netip.Prefix
	// SelfAddr makes a host's own name resolve to its bridge address. By
	// default it resolves to 127.0.1.1, as Debian's /etc/hosts has it, so
	// a program that derives its address from its own host name finds
	// loopback: a real deployment's trap, kept on purpose.
	SelfAddr bool
}

// DefaultConfig is three hosts, a chosen subnet, and Debian's self entry.
func DefaultConfig() Config { return Config{Hosts: 3} }

// Validate checks every field. It never changes c. Errors are
// *ConfigError wrapping ErrConfig.
func (c Config) Validate() error {
	bad := func(field string, v any, reason string) error {
		return &ConfigError{Field: field, Value: fmt.Sprint(v), Reason: reason}
	}
	if c.Hosts < 1 || c.Hosts > MaxHosts {
		return bad("Hosts", c.Hosts, fmt.Sprintf("must be 1..%d", MaxHosts))
	}
	if c.Subnet.IsValid() {
		if !c.Subnet.Addr().Is4() || c.Subnet.Bits() != 24 || c.Subnet.Masked() != c.Subnet {
			return bad("Subnet", c.Subnet, "must be an IPv4 /24 with the host bits zero, e.g. 10.201.7.0/24, or unset to choose one")
		}
	}
	return nil
}
