//go:build linux

// Package patronitest runs pgreplica against a Patroni cluster (see
// package patroni) while the manager moves the leader: a switchover, a
// crash of the leader's PostgreSQL (kill -9) and a freeze of the leader
// past its TTL, after which the old leader rejoins as a replica.
package patronitest

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the naive baseline's driver
	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration"
	"github.com/pgreplica/pgreplica/integration/checker"
	"github.com/pgreplica/pgreplica/integration/itest"
	"github.com/pgreplica/pgreplica/integration/patroni"
	"github.com/pgreplica/pgreplica/pgreplicapgx"
)

var (
	syncMode = flag.Bool("patroni.sync", true, "run Patroni with synchronous_mode on (then no acknowledged write may be lost)")
	dcs      = flag.String("patroni.dcs", "etcd", "Patroni's etcd client: etcd (v2 API) or etcd3")
	sessions = flag.Int("patroni.sessions", 8, "concurrent workload sessions")
	dwell    = flag.Duration("patroni.dwell", 2*time.Second, "workload time before the first fault and after each one")
	freeze   = flag.Bool("patroni.freeze", true, "freeze the leader past its TTL as the third fault")
	marks    = flag.String("patroni.watermarks", "half", "sessions that read their watermark after each operation (Session.LSN, as the checker does) "+
		"so that writes are checked to raise it: all, half (the even ones) or none")
	via = flag.String("patroni.via", "members", "how the application reaches the cluster: members (every member's address), "+
		"haproxy (HAProxy's writer and reader ports, on Patroni's health checks) or discovery (one name PatroniLookup answers from the REST API)")
	router = flag.String("patroni.router", "pgreplica", "the router under test: pgreplica, or naive (the baseline: plain pgx, writes to HAProxy's "+
		"writer port, reads to its reader port, nothing to tell a fresh replica; its violations are reported, not failed)")
	nativePgx = flag.Bool("patroni.pgx", false, "run the sessions through pgreplicapgx's native pool instead of database/sql "+
		"(the checker's pgreplicapgx-session target; the inner driver is pgx)")
	innerDriver = flag.String("patroni.driver", "pgx", "the inner driver of pgreplica's handle: pgx or pq (lib/pq)")
	replicated  = flag.Int("patroni.replicated", 0, "make every write through pgreplica ask WithReplicated(ctx, n): acknowledged once n replicas "+
		"flushed it (then no acknowledged write may be lost, with synchronous_mode off too)")
	nfaults = flag.Int("patroni.faults", 3, "faults the nemesis injects, in turn a switchover, a kill -9 of the leader and (with -patroni.freeze) "+
		"a freeze of the leader past its TTL")
	ownRows = flag.String("patroni.own", "session", "how a session writes and reads its own rows: session (with its Session, "+
		"the checker's pgreplica-session target) or process (no Session: the driver's process consistency, the checker's pgreplica-process target)")
	membership = flag.Bool("patroni.membership", false, "after those, add a member while the workload runs and remove a replica "+
		"(the added one unless it leads): with -patroni.via discovery the added member must serve reads")
)

// faultKind is a fault the nemesis can inject: do injects it and records
// in f what it did.
type faultKind struct {
	name string
	do   func(f *fault) error
}

// fault is one thing the nemesis did.
type fault struct {
	kind          string
	began, leader time.Time // injected; the new leader accepted writes
	healthy       time.Time // a leader and every replica streaming again
	from, to      int
}

// TestPatroniFailover runs sessions through pgreplica, given every
// member's address, each writing its own rows and reading them back
// (and other sessions' rows), while Patroni switches the leader over,
// fails over after a kill -9 of the leader's PostgreSQL, and (with
// -patroni.freeze) after a freeze of the leader past its TTL, the old
// leader rejoining as a replica each time. It asserts no read-your-writes,
// monotonic-read or impossible read, no write that did not raise its
// session's watermark, no acknowledged write started on a demoted primary
// and, with synchronous_mode, no acknowledged write lost; it logs the
// writes and reads that failed, grouped by error, the longest stretch
// without a successful write and the time from each promotion to the first
// write on the new leader.
func TestPatroniFailover(t *testing.T) {
	if *ownRows != "session" && *ownRows != "process" {
		t.Fatalf("-patroni.own=%q: want session or process", *ownRows)
	}
	began := time.Now()
	c := patroni.New(t, patroni.Options{SynchronousMode: *syncMode, DCS: *dcs})
	started := time.Now()
	ctx := itest.Ctx(t, 3*time.Minute+time.Duration(*nfaults)*30*time.Second)
	h, err := c.WaitHealthy(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Exec(ctx, h.Leader, fmt.Sprintf(schema, *sessions-1, keys-1)); err != nil {
		t.Fatal(err)
	}
	db := openRouter(t, c)
	w := newWorkload(db, c, *sessions, keys, uint64(time.Now().UnixNano()), marking(t))
	roles := c.WatchRoles(20 * time.Millisecond)
	view := watchRouter(db.cn)
	writerPort := c.WatchHAProxy(20 * time.Millisecond)
	run := time.Now()
	w.start()
	stopped := false
	halt := func() []op {
		if stopped {
			return nil
		}
		stopped = true
		return w.halt()
	}
	defer halt()
	defer roles.Stop()
	defer writerPort.Stop()

	var faults []fault
	// nemesis lets the workload run, then runs do, which injects a fault
	// (and says when), and waits until the cluster is healthy again.
	nemesis := func(kind string, do func(f *fault) error) {
		t.Helper()
		dwellFor(ctx, *dwell)
		f := fault{kind: kind, began: time.Now()}
		if err := do(&f); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		f.leader = time.Now()
		if _, err := c.WaitHealthy(ctx, 2); err != nil {
			t.Fatalf("after the %s: %v", kind, err)
		}
		if err := c.WaitHAProxy(ctx); err != nil {
			t.Fatalf("after the %s: %v", kind, err)
		}
		f.healthy = time.Now()
		switch kind {
		case kindAdd:
			t.Logf("%s: m%d streaming after %s", kind, f.to, f.leader.Sub(f.began).Round(time.Millisecond))
		case kindRemove:
			t.Logf("%s: m%d gone after %s", kind, f.from, f.leader.Sub(f.began).Round(time.Millisecond))
		default:
			t.Logf("%s: m%d → m%d, new leader after %s, healthy after %s", kind, f.from, f.to,
				f.leader.Sub(f.began).Round(time.Millisecond), f.healthy.Sub(f.began).Round(time.Millisecond))
		}
		faults = append(faults, f)
	}
	kinds := []faultKind{
		{"switchover", func(f *fault) (err error) {
			f.from, f.to, err = c.Switchover(ctx, -1)
			return err
		}},
		{"kill -9", func(f *fault) (err error) {
			if f.from, err = c.Leader(ctx); err != nil {
				return err
			}
			f.began = time.Now()
			if err := c.Kill(f.from); err != nil {
				return err
			}
			f.to, err = c.WaitLeader(ctx, f.from)
			return err
		}},
		// FreezeLeader, with the moment of the freeze.
		{"freeze past the TTL", func(f *fault) (err error) {
			if f.from, err = c.Leader(ctx); err != nil {
				return err
			}
			f.began = time.Now()
			if err := c.Freeze(f.from); err != nil {
				return errors.Join(err, c.Thaw(f.from))
			}
			f.to, err = c.WaitLeader(ctx, f.from)
			return errors.Join(err, c.Thaw(f.from))
		}},
	}
	if !*freeze {
		kinds = kinds[:2]
	}
	if *membership {
		kinds = append(kinds, []faultKind{
			{kindAdd, func(f *fault) (err error) {
				f.from = -1
				f.to, err = c.AddMember(ctx)
				return err
			}},
			{kindRemove, func(f *fault) (err error) {
				f.to = -1
				if f.from, err = removable(ctx, c, faults); err != nil {
					return err
				}
				return c.RemoveMember(ctx, f.from)
			}},
		}...)
	}
	for i := range *nfaults {
		k := kinds[i%len(kinds)]
		nemesis(k.name, k.do)
	}
	dwellFor(ctx, *dwell)
	ops := halt()
	ended := time.Now()
	events := roles.Stop()
	seen := view.Stop()
	var routed []patroni.WriterChange
	if *via == "haproxy" {
		routed = writerPort.Stop()
	}

	final, err := c.WaitHealthy(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := readFinal(ctx, c, final.Leader)
	if err != nil {
		t.Fatalf("reading what the cluster kept: %v\n%s", err, c.Describe(ctx))
	}
	promotions := patroni.Promotions(events)
	out := analyse(ops, fs, promotions, events, c)
	report(t, out, faults, promotions, events, routed, seen, w, run, ended)
	t.Logf("run time: %s (cluster start %s, workload %s, check %s)", time.Since(began).Round(time.Millisecond),
		started.Sub(began).Round(time.Millisecond), ended.Sub(run).Round(time.Millisecond), time.Since(ended).Round(time.Millisecond))

	// The assertions.
	if out.acked == 0 || out.readsOK == 0 {
		t.Fatalf("the workload did nothing: %d writes acknowledged, %d reads", out.acked, out.readsOK)
	}
	for _, f := range faults {
		if _, ok := firstWriteAfter(out.ops, f.healthy, -1); !ok {
			t.Errorf("no write succeeded after the %s once the cluster was healthy again", f.kind)
		}
	}
	if *router == "naive" {
		// The baseline: what it showed is the report above; only the
		// harness's own failures fail the run.
		return
	}
	if len(out.violations) > 0 {
		t.Errorf("%d consistency violations through pgreplica (above)", len(out.violations))
	}
	if len(out.uncovered) > 0 {
		t.Errorf("%d acknowledged writes did not raise their session's watermark (above)", len(out.uncovered))
	}
	if len(out.demoted) > 0 {
		t.Errorf("%d acknowledged writes started on a primary after a newer timeline was promoted (above)", len(out.demoted))
	}
	if lost := len(out.lostFailover) + len(out.unknownLost); lost > 0 && (*syncMode || *replicated > 0) {
		t.Errorf("%d acknowledged writes lost with synchronous_mode %v and WithReplicated(ctx, %d) (above)", lost, *syncMode, *replicated)
	}
	if out.replicaReads == 0 {
		t.Errorf("no read ran on a replica")
	}
	for _, f := range faults {
		// Behind HAProxy a new server gets only new connections, and the
		// pool keeps its own (up to pgreplica_conn_max_lifetime): it
		// takes reads as they are replaced, not within a run.
		if f.kind == kindAdd && *via == "discovery" {
			if _, ok := firstReadOn(out.ops, f.leader, f.to); !ok {
				t.Errorf("m%d, added while the workload ran, served no read", f.to)
			}
		}
	}
}

// The membership faults (-patroni.membership).
const (
	kindAdd    = "add a member"
	kindRemove = "remove a member"
)

// removable is the replica the nemesis removes: the member it added last,
// unless that one leads now, else any replica.
func removable(ctx context.Context, c *patroni.Cluster, done []fault) (int, error) {
	leader, err := c.Leader(ctx)
	if err != nil {
		return -1, err
	}
	for i := len(done) - 1; i >= 0; i-- {
		if f := done[i]; f.kind == kindAdd && f.to != leader && slices.Contains(c.Live(), f.to) {
			return f.to, nil
		}
	}
	for _, m := range c.Live() {
		if m != leader {
			return m, nil
		}
	}
	return -1, errors.New("no replica to remove")
}

// openRouter opens what the sessions run through (-patroni.router,
// -patroni.via).
func openRouter(t *testing.T, c *patroni.Cluster) handles {
	if *router == "naive" {
		if *via != "haproxy" {
			t.Fatalf("-patroni.router=naive reaches the cluster through HAProxy only (-patroni.via=haproxy, not %q)", *via)
		}
		return naiveRouter(t, c)
	}
	if *innerDriver != "pgx" && *innerDriver != "pq" {
		t.Fatalf("-patroni.driver=%q: want pgx or pq", *innerDriver)
	}
	if *router != "pgreplica" {
		t.Fatalf("-patroni.router=%q: want pgreplica or naive", *router)
	}
	if *nativePgx && *innerDriver != "pgx" {
		t.Fatalf("-patroni.pgx runs pgx inside, not %q", *innerDriver)
	}
	withDriver := func(dsn string) string { return dsn + "&pgreplica_driver=" + *innerDriver }
	var cfg pgreplica.Config
	var err error
	switch *via {
	case "members":
		cfg, err = itest.ParseDSN(withDriver(c.DSN()))
	case "haproxy":
		cfg, err = itest.ParseDSN(withDriver(c.HAProxyDSN()))
	case "discovery":
		var urls []string
		for _, i := range c.Live() {
			urls = append(urls, c.RESTAddr(i))
		}
		cfg, err = itest.ParseDSN(withDriver(c.DSN()))
		cfg.Hosts = []pgreplica.Host{{Addr: "patroni-members"}}
		cfg.LookupFunc = pgreplica.PatroniLookup("patroni-members", urls...)
	default:
		t.Fatalf("-patroni.via=%q: want members, haproxy or discovery", *via)
	}
	if err != nil {
		t.Fatal(err)
	}
	if *nativePgx {
		h := openPgx(t, cfg)
		return handles{read: h, write: h, cn: h.p.Connector()}
	}
	db, cn := itest.OpenConfig(t, cfg)
	db.SetMaxOpenConns(4 * *sessions)
	return handles{read: sqlHandle{db}, write: sqlHandle{db}, cn: cn}
}

// openPgx opens pgreplicapgx's pool on cfg, each server's connection
// configuration parsed from cfg as the driver's are.
func openPgx(t *testing.T, cfg pgreplica.Config) pgxHandle {
	cfg.MaxConnsPerHost = 4 * *sessions
	p, err := pgreplicapgx.NewWithConfig(context.Background(), &pgreplicapgx.Config{Routing: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := p.Ping(itest.Ctx(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	return pgxHandle{p}
}

// naiveRouter is the baseline a platform's docs suggest behind Patroni's
// HAProxy: plain pgx (database/sql), writes to the writer port, reads to
// the reader port, nothing that knows a replica's freshness.
func naiveRouter(t *testing.T, c *patroni.Cluster) handles {
	open := func(addr string) *sql.DB {
		db, err := sql.Open("pgx", integration.HostsDSN(addr))
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(2 * *sessions)
		t.Cleanup(func() { db.Close() })
		return db
	}
	return handles{write: sqlHandle{open(c.HAProxyAddr(patroni.Writer))}, read: sqlHandle{open(c.HAProxyAddr(patroni.Reader))}}
}

// marking returns which sessions read their watermark (-patroni.watermarks).
func marking(t *testing.T) func(int) bool {
	if *router == "naive" {
		return func(int) bool { return false } // it has none
	}
	switch *marks {
	case "all":
		return func(int) bool { return true }
	case "half":
		return func(i int) bool { return i%2 == 0 }
	case "none":
		return func(int) bool { return false }
	}
	t.Fatalf("-patroni.watermarks=%q: want all, half or none", *marks)
	return nil
}

// keys is each session's number of rows.
const keys = 4

// dwellFor lets the workload run for d (or until ctx ends): time for it to
// work between faults, not a wait for a condition.
func dwellFor(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// report logs what the run showed.
func report(t *testing.T, out *outcome, faults []fault, promotions []patroni.Promotion, events []patroni.RoleEvent,
	routed []patroni.WriterChange, seen []viewEvent, w *workload, began, ended time.Time) {
	t.Helper()
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	mode := "off"
	if *syncMode {
		mode = "on"
	}
	if *replicated > 0 && *router != "naive" {
		mode += fmt.Sprintf(", writes WithReplicated(ctx, %d)", *replicated)
	}
	name := *router
	if *router != "naive" {
		handle := "database/sql"
		if *nativePgx {
			handle = "pgreplicapgx"
		}
		name += " (" + handle + ", " + *innerDriver + " inside, own rows with " + *ownRows + " consistency)"
	}
	p("Patroni run: %s through %s, synchronous_mode %s, %s DCS client, %d sessions, %d faults, %s of workload",
		name, *via, mode, *dcs, *sessions, len(faults), ended.Sub(began).Round(time.Millisecond))
	p("  writes: %d, acknowledged %d, failed %d", out.writes, out.acked, out.writes-out.acked)
	p("  reads: %d, succeeded %d (%d on replicas, %.0f%%), failed %d", out.reads, out.readsOK, out.replicaReads,
		100*float64(out.replicaReads)/float64(max(out.readsOK, 1)), out.reads-out.readsOK)
	p("  read-your-writes / monotonic / impossible violations: %d / %d / %d",
		count(out.violations, checker.ReadYourWrites), count(out.violations, checker.MonotonicRead), count(out.violations, checker.Impossible))
	if *marks != "none" {
		p("  acknowledged writes that did not raise the session's watermark: %d (and %d made while it was at 7FFFFFFF/FFFFFFFF or above)",
			len(out.uncovered), out.writesPoisoned)
	}
	p("  acknowledged writes lost: %d in failovers, %d with a timeline the manager abandoned, %d on an unknown server, %d on demoted primaries",
		len(out.lostFailover), len(out.lostAbandoned), len(out.unknownLost), countLost(out.demoted, out))
	p("  acknowledged writes started on a demoted primary: %d; reads run on one: %d", len(out.demoted), len(out.demotedReads))
	p("  reads of versions the cluster lost afterwards (left out of the check): %d", out.sawLost)
	if len(out.writeErrors) > 0 {
		p("  failed writes by error:%s", groups(out.writeErrors))
	}
	if len(out.readErrors) > 0 {
		p("  failed reads by error:%s", groups(out.readErrors))
	}
	gaps := writeGaps(out.ops, began, ended)
	if len(gaps) > 0 {
		g := gaps[0]
		p("  longest stretch without a successful write: %s (%s – %s)", g.d().Round(time.Millisecond),
			g.from.Format("15:04:05.000"), g.to.Format("15:04:05.000"))
	}
	for _, f := range faults {
		if f.kind == kindAdd || f.kind == kindRemove {
			reportMembership(p, out, f)
			continue
		}
		p("  %s at %s: m%d → m%d; new leader accepted writes after %s, all replicas streaming after %s",
			f.kind, f.began.Format("15:04:05.000"), f.from, f.to, f.leader.Sub(f.began).Round(time.Millisecond),
			f.healthy.Sub(f.began).Round(time.Millisecond))
		p("    failed during it: %d writes, %d reads", failuresBetween(out.ops, checker.OpWrite, f.began, f.healthy),
			failuresBetween(out.ops, checker.OpRead, f.began, f.healthy))
		for _, g := range gaps {
			if !g.to.Before(f.began) && g.from.Before(f.healthy) && g.d() > 500*time.Millisecond {
				p("    stretch without a successful write: %s (from %s after the fault began)", g.d().Round(time.Millisecond),
					g.from.Sub(f.began).Round(time.Millisecond))
			}
		}
		if o, ok := firstWriteStarted(out.ops, f.began); ok {
			p("    first write started after the fault began that succeeded: acknowledged %s after it", o.End.Sub(f.began).Round(time.Millisecond))
		}
	}
	for i, pr := range promotions {
		if i == 0 {
			continue // the first primary seen
		}
		line := fmt.Sprintf("  promotion of m%d to timeline %d seen at %s", pr.Member, pr.Timeline, pr.At.Format("15:04:05.000"))
		o, wrote := firstWriteAfter(out.ops, pr.At, pr.Member)
		if wrote {
			line += fmt.Sprintf(": first successful write on it %s later", o.End.Sub(pr.At).Round(time.Millisecond))
		} else {
			line += ": no successful write on it"
		}
		if at, ok := sawPrimary(seen, w.c.Addr(pr.Member), pr.Timeline); ok {
			line += fmt.Sprintf("; the router's probes showed it %s later", at.Sub(pr.At).Round(time.Millisecond))
		}
		line += afterPromotion(out.ops, pr)
		// Through HAProxy no client reaches the new primary before its
		// checks let it: what the client adds is counted from there.
		if at, ok := patroni.WriterUpAfter(routed, pr.At, pr.Member); ok && wrote {
			d, when := o.End.Sub(at), "after"
			if d < 0 {
				d, when = -d, "before" // a connection through the reader port found it promoted
			}
			line += fmt.Sprintf(" (HAProxy's writer port took it %s after the promotion, the write came %s %s that)",
				at.Sub(pr.At).Round(time.Millisecond), d.Round(time.Millisecond), when)
		}
		p("%s", line)
	}
	for _, o := range patroni.Overlaps(events) {
		p("  two servers out of recovery at once: members %v for %s from %s", o.Members, o.To.Sub(o.From).Round(time.Millisecond),
			o.From.Format("15:04:05.000"))
	}
	for _, marking := range []bool{true, false} {
		var ok, replica, failedReads, failedWrites, n int
		for i := range w.ss {
			if w.marks(i) != marking {
				continue
			}
			n++
			for _, o := range out.ops {
				if o.Session != i {
					continue
				}
				switch {
				case o.Kind == checker.OpRead && o.Err == nil:
					ok++
					if !o.OnPrimary {
						replica++
					}
				case o.Kind == checker.OpRead && !errors.Is(o.Err, errSawLost):
					failedReads++
				case o.Kind == checker.OpWrite && o.Err != nil && !errors.Is(o.Err, errLost):
					failedWrites++
				}
			}
		}
		if n == 0 {
			continue
		}
		what := "not reading their watermark"
		if marking {
			what = "reading their watermark after each operation"
		}
		p("  %d sessions %s: %d reads, %.0f%% on replicas; %d reads and %d writes failed", n, what, ok,
			100*float64(replica)/float64(max(ok, 1)), failedReads, failedWrites)
	}
	var stuck []string
	for i, s := range w.ss {
		if s.LSN() >= poisoned {
			what := "not reading its watermark"
			if w.marks(i) {
				what = "reading its watermark"
			}
			stuck = append(stuck, fmt.Sprintf("%d (%s)", i, what))
		}
	}
	p("  sessions whose watermark ended at 7FFFFFFF/FFFFFFFF or above: %d of %d %v", len(stuck), len(w.ss), stuck)
	t.Log(b.String())

	show := func(what string, ops []op) {
		for i, o := range ops {
			if i == 10 {
				t.Logf("  … and %d more", len(ops)-10)
				break
			}
			t.Logf("%s: %s (timeline %d)", what, &o.Op, o.Timeline)
		}
	}
	for i, v := range out.violations {
		if i == 20 {
			t.Logf("… and %d more violations", len(out.violations)-20)
			break
		}
		t.Logf("%s", v)
	}
	for i, v := range out.uncovered {
		if i == 10 {
			break
		}
		t.Logf("%s", v)
	}
	show("write on a demoted primary", out.demoted)
	show("read on a demoted primary", out.demotedReads)
	show("lost in a failover", out.lostFailover)
	show("lost with an abandoned timeline", out.lostAbandoned)
	show("lost, server unknown", out.unknownLost)
	if t.Failed() || testing.Verbose() {
		var ev []string
		for _, e := range events {
			ev = append(ev, e.String())
		}
		t.Logf("role changes seen:\n  %s", strings.Join(ev, "\n  "))
	}
}

// reportMembership reports an added or removed member: when it streamed
// or left, its first read, and what failed meanwhile.
func reportMembership(p func(string, ...any), out *outcome, f fault) {
	if f.kind == kindAdd {
		line := fmt.Sprintf("  %s at %s: m%d streaming (and in HAProxy) after %s", f.kind, f.began.Format("15:04:05.000"),
			f.to, f.leader.Sub(f.began).Round(time.Millisecond))
		if o, ok := firstReadOn(out.ops, f.leader, f.to); ok {
			line += fmt.Sprintf("; its first read %s after that", o.End.Sub(f.leader).Round(time.Millisecond))
		} else {
			line += "; no read on it"
		}
		p("%s", line)
	} else {
		p("  %s at %s: m%d out of /cluster after %s; reads on it after that: %d", f.kind, f.began.Format("15:04:05.000"),
			f.from, f.leader.Sub(f.began).Round(time.Millisecond), readsOnAfter(out.ops, f.leader, f.from))
	}
	p("    failed during it: %d writes, %d reads", failuresBetween(out.ops, checker.OpWrite, f.began, f.healthy),
		failuresBetween(out.ops, checker.OpRead, f.began, f.healthy))
}

func count(vs []checker.Violation, k checker.Kind) int {
	n := 0
	for _, v := range vs {
		if v.Kind == k {
			n++
		}
	}
	return n
}

// countLost counts the ops of demoted that the cluster did not keep.
func countLost(demoted []op, out *outcome) int {
	n := 0
	for _, d := range demoted {
		for _, o := range out.ops {
			if o.Session == d.Session && o.Seq == d.Seq && o.Err == errLost {
				n++
			}
		}
	}
	return n
}
