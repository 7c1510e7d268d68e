package pgreplica

import (
	"context"
	"fmt"
	"net"
	"strings"
)

// checkSingleAddress names a host name that does not resolve as such
// ("cannot resolve host …", wrapping the *net.DNSError: a typo in the DSN
// must not read like a host that is down), and refuses one that resolves
// to several addresses: the probe and each pooled connection could reach
// different servers behind one name, and a role learnt from one would
// route statements to another. Such a host is excluded (its status
// carries this error) until its name resolves to one address. IP
// addresses and Unix socket directories are not looked up.
func checkSingleAddress(ctx context.Context, addr string, lookup func(context.Context, string) ([]string, error)) error {
	if strings.HasPrefix(addr, "/") || net.ParseIP(addr) != nil {
		return nil
	}
	addrs, err := lookup(ctx, addr)
	if err != nil {
		return &resolveError{host: addr, err: err}
	}
	if len(addrs) > 1 {
		return fmt.Errorf("%w: host %s resolves to %d addresses (%s); list each server as its own host",
			ErrAmbiguousHost, addr, len(addrs), strings.Join(addrs, ", "))
	}
	return nil
}
