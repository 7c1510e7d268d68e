package checker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pgreplica/pgreplica/integration"
)

// Deployment shapes: what stands between the application and the servers.
//
// A Deployment runs the checker through real PgBouncer and HAProxy
// processes (see integration.StartPgBouncer and integration.StartHAProxy)
// in front of a cluster. Its DSN is the multi-host URL an application
// would be given in that deployment, and the naive router goes through
// the same proxies; everything the checker does itself (admin SQL, lag,
// kills, ports) still goes to the servers directly. A query through a
// proxy still reports the real server's inet_server_port(), so the
// history still says which node served each read.

// Shape is a deployment between the application and the cluster.
type Shape string

// Shapes.
const (
	// ShapeDirect: every node's own address, no proxy.
	ShapeDirect Shape = "direct"
	// ShapeBouncerSession: one PgBouncer in session mode in front of each
	// node; the DSN names the PgBouncers, in node order.
	ShapeBouncerSession Shape = "pgbouncer-session"
	// ShapeBouncerTx: one PgBouncer in transaction mode in front of each
	// node; pgx runs with default_query_exec_mode=exec (no server-side
	// prepared statements, one Sync per statement).
	ShapeBouncerTx Shape = "pgbouncer-tx"
	// ShapeBouncerTxSimple: as ShapeBouncerTx, with pgx's
	// default_query_exec_mode=simple_protocol.
	ShapeBouncerTxSimple Shape = "pgbouncer-tx-simple"
	// ShapeEndpoint: the primary's own address and one HAProxy "reader
	// endpoint" that sends each new connection to the next replica: a DSN
	// of two hosts for three servers.
	ShapeEndpoint Shape = "haproxy-endpoint"
	// ShapeBouncerEndpoint: PgBouncer in transaction mode in front of the
	// primary and another in front of the HAProxy reader endpoint (whose
	// server connections go to either replica); pgx runs with
	// default_query_exec_mode=exec. The DSN has the two PgBouncers.
	ShapeBouncerEndpoint Shape = "pgbouncer-tx-endpoint"
)

// Shapes lists every shape, the direct one first.
func Shapes() []Shape {
	return []Shape{ShapeDirect, ShapeBouncerSession, ShapeBouncerTx, ShapeBouncerTxSimple, ShapeEndpoint, ShapeBouncerEndpoint}
}

// ParseShape accepts a Shape's name.
func ParseShape(s string) (Shape, error) {
	var names []string
	for _, sh := range Shapes() {
		if string(sh) == s {
			return sh, nil
		}
		names = append(names, string(sh))
	}
	return "", fmt.Errorf("checker: unknown shape %q (want one of %s)", s, strings.Join(names, ", "))
}

// Proxy is a proxy process of a Deployment: *integration.PgBouncer and
// *integration.HAProxy are ones.
type Proxy interface {
	Addr() string
	// Restart stops the process and starts it again on the same port,
	// and returns how long the port refused connections.
	Restart(ctx context.Context) (time.Duration, error)
	Running() bool
	Close() error
}

// shapeProxy is one proxy of a Deployment with its name in reports.
type shapeProxy struct {
	name string
	p    Proxy
}

// Deployment is a Cluster seen through a Shape: DSN names the proxies the
// shape puts in front of the servers; every other method is the
// underlying Cluster's and reaches the servers directly (NodeDSN too).
// Run on a Deployment routes pgreplica through DSN, the naive router
// through the same proxies, and with Faults.RestartProxies restarts the
// proxies during the run. Close stops them.
type Deployment struct {
	Cluster
	shape   Shape
	hosts   []string // the DSN's host:port addresses
	writer  string   // the naive router's writer address
	readers []string // the naive router's reader addresses
	pgxMode string   // pgx's default_query_exec_mode, if the shape needs one
	pooled  bool     // behind PgBouncer in transaction mode
	proxies []shapeProxy
}

// Deploy starts the proxies of shape s in front of cl's servers, which
// listen on 127.0.0.1 at cl.Port(i), and returns the Deployment. Close
// stops them. The error wraps integration.ErrNoPgBouncer or
// integration.ErrNoHAProxy when a program the shape needs is missing.
func Deploy(ctx context.Context, cl Cluster, s Shape) (_ *Deployment, err error) {
	if _, err := ParseShape(string(s)); err != nil {
		return nil, err
	}
	d := &Deployment{Cluster: cl, shape: s}
	defer func() {
		if err != nil {
			err = errors.Join(err, d.Close())
		}
	}()
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", cl.Port(i)) }
	primary, replicas := cl.Primary(), replicasOf(cl)
	bouncer := func(name, upstream string, mode integration.PoolMode) (string, error) {
		b, err := integration.StartPgBouncer(ctx, integration.PgBouncerOptions{Upstream: upstream, Mode: mode})
		if err != nil {
			return "", fmt.Errorf("checker: shape %s: %w", s, err)
		}
		d.proxies = append(d.proxies, shapeProxy{name, b})
		return b.Addr(), nil
	}
	switch s {
	case ShapeDirect:
		for i := range cl.Len() {
			d.hosts = append(d.hosts, addr(i))
		}
		d.writer = addr(primary)
		for _, i := range replicas {
			d.readers = append(d.readers, addr(i))
		}
	case ShapeBouncerSession, ShapeBouncerTx, ShapeBouncerTxSimple:
		mode := integration.PoolSession
		switch s {
		case ShapeBouncerTx:
			mode, d.pgxMode, d.pooled = integration.PoolTransaction, "exec", true
		case ShapeBouncerTxSimple:
			mode, d.pgxMode, d.pooled = integration.PoolTransaction, "simple_protocol", true
		}
		for i := range cl.Len() {
			a, err := bouncer(fmt.Sprintf("pgbouncer%d", i), addr(i), mode)
			if err != nil {
				return nil, err
			}
			d.hosts = append(d.hosts, a)
			if i == primary {
				d.writer = a
			} else {
				d.readers = append(d.readers, a)
			}
		}
	case ShapeEndpoint, ShapeBouncerEndpoint:
		if len(replicas) == 0 {
			return nil, fmt.Errorf("checker: shape %s needs replicas", s)
		}
		var backends []string
		for _, i := range replicas {
			backends = append(backends, addr(i))
		}
		h, err := integration.StartHAProxy(ctx, integration.HAProxyOptions{Backends: backends})
		if err != nil {
			return nil, fmt.Errorf("checker: shape %s: %w", s, err)
		}
		d.proxies = append(d.proxies, shapeProxy{"haproxy", h})
		if s == ShapeEndpoint {
			d.writer = addr(primary)
			d.readers = []string{h.Addr()}
			break
		}
		d.pgxMode, d.pooled = "exec", true
		if d.writer, err = bouncer("pgbouncer-primary", addr(primary), integration.PoolTransaction); err != nil {
			return nil, err
		}
		r, err := bouncer("pgbouncer-endpoint", h.Addr(), integration.PoolTransaction)
		if err != nil {
			return nil, err
		}
		d.readers = []string{r}
	}
	if d.hosts == nil {
		d.hosts = append([]string{d.writer}, d.readers...)
	}
	return d, nil
}

// Shape returns the deployment's shape.
func (d *Deployment) Shape() Shape { return d.shape }

// DSN returns the multi-host URL of the deployment: the addresses an
// application is given (the proxies', and the primary's own where no
// proxy stands in front of it).
func (d *Deployment) DSN() string { return integration.HostsDSN(d.hosts...) }

// Proxies returns the names of the deployment's proxy processes.
func (d *Deployment) Proxies() []string {
	var out []string
	for _, p := range d.proxies {
		out = append(out, p.name)
	}
	return out
}

// driverParams returns the DSN parameters that driver needs in this
// shape: pgx's default_query_exec_mode behind PgBouncer in transaction
// mode (its default caches server-side prepared statements, which such a
// pool cannot keep); for lib/pq there, binary_parameters=yes, without
// which it prepares an unnamed statement and runs it in two separate
// Syncs that PgBouncer may send to two server connections.
func (d *Deployment) driverParams(driver string) []string {
	switch {
	case driver == "pgx" && d.pgxMode != "":
		return []string{"default_query_exec_mode", d.pgxMode}
	case driver == "pq" && d.pooled:
		return []string{"binary_parameters", "yes"}
	}
	return nil
}

// naiveDSNs returns the naive router's writer and reader URLs.
func (d *Deployment) naiveDSNs() (string, []string) {
	var readers []string
	for _, r := range d.readers {
		readers = append(readers, integration.HostsDSN(r))
	}
	return integration.HostsDSN(d.writer), readers
}

// Close stops the deployment's proxies (not the cluster). It may be
// called more than once.
func (d *Deployment) Close() error {
	var errs []error
	for _, p := range d.proxies {
		errs = append(errs, p.p.Close())
	}
	d.proxies = nil
	return errors.Join(errs...)
}

// driverParams returns what cl's shape needs of driver's DSN (nothing
// outside a Deployment).
func driverParams(cl Cluster, driver string) []string {
	if d, ok := cl.(*Deployment); ok {
		return d.driverParams(driver)
	}
	return nil
}

// naiveDSNs returns the naive router's writer and reader URLs for cl: the
// primary's and each replica's own, or a Deployment's.
func naiveDSNs(cl Cluster) (string, []string) {
	if d, ok := cl.(*Deployment); ok {
		return d.naiveDSNs()
	}
	var readers []string
	for _, i := range replicasOf(cl) {
		readers = append(readers, cl.NodeDSN(i))
	}
	return cl.NodeDSN(cl.Primary()), readers
}

// shapeOf returns cl's shape: a Deployment's, else ShapeDirect.
func shapeOf(cl Cluster) Shape {
	if d, ok := cl.(*Deployment); ok {
		return d.shape
	}
	return ShapeDirect
}
