package libpqdsn

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// HostPort is one server of a DSN, its port explicit.
type HostPort struct {
	Addr string
	Port uint16
}

// Hosts combines the URL authority, the last host parameter and the last
// port parameter into the DSN's servers, each with its port: its own in
// the URL, else the port parameter (one for all hosts or one per host),
// else DefaultPort.
func (p DSN) Hosts() ([]HostPort, error) {
	var (
		hostParam, portParam string
		hostSet, portSet     bool
	)
	for _, kv := range p.Params {
		switch kv.Key {
		case "host":
			hostParam, hostSet = kv.Val, true
		case "port":
			portParam, portSet = kv.Val, true
		}
	}
	show := func(s string) string {
		if p.hideHosts {
			return "(not shown)"
		}
		return strconv.Quote(s)
	}
	errHost := func(format string, args ...any) error {
		if p.hideHosts {
			format += hiddenHostText
		}
		return errorf(format, args...)
	}
	netNamed := slices.ContainsFunc(p.netHosts, func(h string) bool { return h != "" })
	var addrs, explicit []string
	switch {
	case netNamed && hostSet:
		return nil, errorf("hosts given both in the URL and in the host parameter")
	case netNamed:
		addrs, explicit = p.netHosts, p.netPorts
	default:
		if hostSet {
			addrs = SplitList(hostParam)
		}
		if slices.ContainsFunc(p.netPorts, func(s string) bool { return s != "" }) {
			explicit = p.netPorts
		}
	}
	if len(addrs) == 0 {
		return nil, errorf("no host: name at least one server (pgreplica does not read PGHOST)")
	}
	if len(explicit) > 1 && len(explicit) != len(addrs) {
		return nil, errorf("%d ports in the URL for %d hosts", len(explicit), len(addrs))
	}
	var ports []string
	if portSet {
		ports = SplitList(portParam)
		if len(ports) != 1 && len(ports) != len(addrs) {
			return nil, errorf("%d ports for %d hosts: give one port for all hosts or one per host", len(ports), len(addrs))
		}
	}
	pick := func(list []string, i int) string {
		switch len(list) {
		case 0:
			return ""
		case 1:
			return list[0]
		}
		return list[i]
	}
	hosts := make([]HostPort, len(addrs))
	seen := make(map[HostPort]int, len(addrs))
	for i, a := range addrs {
		if a == "" {
			if len(addrs) == 1 {
				return nil, errorf("host is empty")
			}
			return nil, errorf("host list entry %d is empty", i+1)
		}
		if err := checkHostAddr(a); err != "" {
			return nil, errHost("host %s: %s", show(a), err)
		}
		port := uint16(DefaultPort)
		if s := pick(explicit, i); s != "" {
			n, err := parsePort(s)
			if err != nil {
				return nil, errHost("port %s of host %d: %v", show(s), i+1, err)
			}
			port = n
		} else if s := pick(ports, i); s != "" {
			n, err := parsePort(s)
			if err != nil {
				return nil, errorf("port %q: %v", s, err)
			}
			port = n
		}
		h := HostPort{Addr: a, Port: port}
		if j, dup := seen[h]; dup {
			return nil, errHost("host %s port %d is listed twice (entries %d and %d)", show(a), port, j+1, i+1)
		}
		seen[h] = i
		hosts[i] = h
	}
	return hosts, nil
}

// checkHostAddr returns why a is not a usable host, or "".
func checkHostAddr(a string) string {
	if strings.IndexByte(a, ':') < 0 || strings.HasPrefix(a, "/") || strings.HasPrefix(a, "@") {
		return ""
	}
	if _, err := netip.ParseAddr(a); err == nil {
		return ""
	}
	return "a ':' belongs only in an IPv6 address (give ports in the port parameter)"
}

// SplitList splits a comma-separated list, trimming spaces around entries.
func SplitList(s string) []string {
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.Trim(parts[i], Spaces)
	}
	return parts
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 || s[0] == '+' {
		return 0, fmt.Errorf("want a number from 1 to 65535")
	}
	return uint16(n), nil
}
