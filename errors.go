package pgreplica

import (
	"database/sql/driver"
	"errors"
	"net"
	"strings"

	"github.com/pgreplica/pgreplica/internal/libpqdsn"
	"github.com/pgreplica/pgreplica/internal/sqlstate"
)

// The driver's errors: the sentinels callers branch on, the error of a
// read no replica could serve (NoFreshReplicaError), a host's failure
// (HostError) and the cluster's made of them (hostsError), the wrappers
// that name a failed name lookup and mask a password, and the words of a
// read that waited in vain (what it waited for, how long, the replica that
// came closest, what ended the wait). docs/errors.md says what to do
// about each.

// Sentinel errors that callers branch on with errors.Is. Errors returned by
// the driver wrap one of these with context (which host, which option, why).
var (
	// ErrBadDSN reports a data source name that cannot be parsed.
	ErrBadDSN = errors.New("pgreplica: malformed DSN")
	// ErrUnknownOption reports a pgreplica_* parameter (or Config value) the
	// driver does not know; the message names the valid ones.
	ErrUnknownOption = errors.New("pgreplica: unknown option")
	// ErrBadConfig reports a Config value that is out of range.
	ErrBadConfig = errors.New("pgreplica: invalid configuration")
	// ErrNoReachableHost reports that no host of the DSN answered. The
	// error names each host with its cause, and wraps a *HostError for
	// each.
	ErrNoReachableHost = errors.New("pgreplica: no reachable host")
	// ErrAuth reports a host that refused the credentials: a wrong
	// password (SQLSTATE 28P01), or a role that does not exist or that
	// pg_hba.conf does not let in (28000), from either inner driver. It
	// matches through that host's *HostError, so the server's own error
	// stays reachable too (errors.As with *pgconn.PgError or *pq.Error).
	// Trying again does not help: the configuration must change.
	ErrAuth = errors.New("pgreplica: authentication failed")
	// ErrNoPrimary reports that no host is out of recovery, or that the
	// primary stopped accepting connections since it was last probed
	// (nothing was sent): writes fail, reads still go to replicas. The
	// error names the hosts that failed with their causes (wrapping a
	// *HostError for each) and those in recovery.
	ErrNoPrimary = errors.New("pgreplica: no primary")
	// ErrSplitBrain reports that more than one host claims to be the primary
	// and the driver cannot tell which one is legitimate; no write is sent.
	ErrSplitBrain = errors.New("pgreplica: more than one primary (split brain)")
	// ErrNoReplica reports a read that had to be served by a replica
	// (FallbackError) when no replica was usable at all: none healthy, or
	// none within the lag bounds. Such an error matches ErrNoFreshReplica
	// too.
	ErrNoReplica = errors.New("pgreplica: no usable replica")
	// ErrNoFreshReplica reports that no replica reached the read's required
	// position (or staleness bound) in time and the fallback policy forbade
	// the primary. The wrapping error says why (timeout, none healthy, ...).
	ErrNoFreshReplica = errors.New("pgreplica: no replica fresh enough")
	// ErrFallbackLimit reports a read that had to fall back to the primary
	// while half the primary's pool (Config.MaxConnsPerHost) served reads
	// that already did, and its context ended first.
	ErrFallbackLimit = errors.New("pgreplica: too many reads falling back to the primary")
	// ErrBadToken reports a consistency token that is garbled, oversized, of
	// an unknown version, forged or expired.
	ErrBadToken = errors.New("pgreplica: bad token")
	// ErrWriteOutcomeUnknown reports a write whose connection was lost after
	// it was sent: it may or may not have committed. It is never retried.
	ErrWriteOutcomeUnknown = errors.New("pgreplica: write outcome unknown (connection lost)")
	// ErrNotReplicated reports a write of a WithReplicated context that
	// committed on the primary but was not shown flushed on as many
	// replicas as asked before the context ended. The write is not lost
	// and must not be sent again (see NotReplicatedError).
	ErrNotReplicated = errors.New("pgreplica: write committed on the primary, not yet on the replicas asked for")
	// ErrClosed reports use of a connector after Close.
	ErrClosed = errors.New("pgreplica: connector closed")
	// ErrInsufficientPrivilege reports that the connecting role lacks a
	// privilege the driver needs: a function the router cannot do without (pg_control_system(), the
	// WAL position functions) revoked from the role. Connect and Ping
	// return it; docs/operations.md lists what each feature needs.
	ErrInsufficientPrivilege = errors.New("pgreplica: insufficient privilege")
)

// NoFreshReplicaError is the error of a read that no replica could serve
// and that was not allowed to fall back to the primary, or found none to
// fall back to (then the error wraps it and ErrNoPrimary). It matches
// errors.Is(err, ErrNoFreshReplica); Reason is ReasonTimeout or
// ReasonNoReplica, and with ReasonNoReplica it matches ErrNoReplica too.
// Replicas that gave the read no connection are in the error beside it,
// each a *HostError.
type NoFreshReplicaError struct {
	Reason string
	Detail string
}

func (e *NoFreshReplicaError) Error() string {
	return ErrNoFreshReplica.Error() + ": " + e.Detail
}

// refusedError is a NoFreshReplicaError with the replicas that gave no
// connection, and why: errors.As finds each *HostError, and through it
// the inner driver's error.
type refusedError struct {
	*NoFreshReplicaError
	hosts []*HostError
}

func (e *refusedError) Error() string {
	var b strings.Builder
	b.WriteString(e.NoFreshReplicaError.Error())
	sep := ": "
	for _, h := range e.hosts {
		b.WriteString(sep)
		b.WriteString(h.Error())
		sep = "; "
	}
	return b.String()
}

func (e *refusedError) Unwrap() []error {
	out := []error{e.NoFreshReplicaError}
	for _, h := range e.hosts {
		out = append(out, h)
	}
	return out
}

// Is makes errors.Is(err, ErrNoFreshReplica) true, and errors.Is(err,
// ErrNoReplica) when no replica was usable at all.
func (e *NoFreshReplicaError) Is(target error) bool {
	return target == ErrNoFreshReplica || target == ErrNoReplica && e.Reason == ReasonNoReplica
}

// HostError is why one host could not be used: its probe, or a connection
// to it, failed. The errors of Ping and of statements that found no usable
// host (ErrNoReachableHost, ErrNoPrimary) wrap one per failed host, so
// that errors.As finds it and, through it, the inner driver's own error
// (*pgconn.PgError, *pq.Error, *net.OpError, *net.DNSError, ...): code
// that branches on a SQLSTATE (28P01, 28000, 3D000) keeps working behind
// the router. errors.Is(err, ErrAuth) holds when the host refused the
// credentials.
//
// Its message is the host and the cause without what the inner driver
// repeats of the host (pgx: "failed to connect to `user=… database=…`:
// host:port (host): …"): the server's error when there is one, the
// failed system call of a network error, the failed name lookup.
type HostError struct {
	// Addr is the host as the DSN names it, host:port.
	Addr string
	// Err is the cause, as the inner driver or the probe reported it.
	Err error
}

func (e *HostError) Error() string { return e.Addr + ": " + causeText(e.Err) }

func (e *HostError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrAuth) true for a host that refused the
// credentials.
func (e *HostError) Is(target error) bool { return target == ErrAuth && isAuthFailure(e.Err) }

// asHostError returns the *HostError err holds, or one that names addr
// with err as its cause.
func asHostError(addr string, err error) *HostError {
	if he := (*HostError)(nil); errors.As(err, &he) {
		return he
	}
	return &HostError{Addr: addr, Err: err}
}

// newHostError wraps the cause of a failed host. driver.ErrBadConn is kept
// out of the chain: database/sql would take it for its own connection and
// run the statement again, and the router's errors are final.
func newHostError(addr string, err error) *HostError {
	if errors.Is(err, driver.ErrBadConn) {
		err = errors.New(err.Error())
	}
	return &HostError{Addr: addr, Err: err}
}

// isAuthFailure reports a server's refusal of the credentials, from either
// inner driver.
func isAuthFailure(err error) bool {
	switch sqlstate.Of(err) {
	case sqlstate.InvalidAuthorization, sqlstate.InvalidPassword:
		return true
	}
	return false
}

// causeText is the part of a host's error that says why, without the
// host: failures of several hosts for one reason then read alike and are
// named once (see hostsError).
func causeText(err error) string {
	var red *redactedError
	if errors.As(err, &red) {
		return red.msg // an inner message could show the password
	}
	var res *resolveError
	if errors.As(err, &res) {
		return res.Error()
	}
	var srv interface {
		error
		SQLState() string
	}
	if errors.As(err, &srv) {
		return srv.Error()
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Op + ": " + op.Err.Error() // "dial: connect: connection refused"
	}
	return err.Error()
}

// hostsError is the error of a condition of the whole cluster (no host
// reachable, no primary) with the hosts behind it. Its message names the
// hosts that failed grouped by cause, each cause once ("h1:5432, h2:5432:
// FATAL: password authentication failed …"), then what the others said;
// it unwraps to its sentinels and to one *HostError per failed host, so
// errors.Is and errors.As reach every cause.
type hostsError struct {
	// kinds are the sentinels, the outermost first: ErrNoPrimary,
	// ErrNoReachableHost.
	kinds []error
	// failed are the hosts whose probe or connection failed.
	failed []*HostError
	// inRecovery and unprobed name the hosts that answered as replicas
	// and those not probed yet.
	inRecovery, unprobed []string
}

func (e *hostsError) Error() string {
	var b strings.Builder
	b.WriteString(e.kinds[0].Error())
	for _, k := range e.kinds[1:] {
		b.WriteString(": ")
		b.WriteString(strings.TrimPrefix(k.Error(), "pgreplica: "))
	}
	sep := ": "
	part := func(s string) {
		b.WriteString(sep)
		b.WriteString(s)
		sep = "; "
	}
	// Causes in the order of their first host, hosts in DSN order.
	var causes []string
	hosts := map[string][]string{}
	for _, h := range e.failed {
		c := causeText(h.Err)
		if _, ok := hosts[c]; !ok {
			causes = append(causes, c)
		}
		hosts[c] = append(hosts[c], h.Addr)
	}
	for _, c := range causes {
		part(strings.Join(hosts[c], ", ") + ": " + c)
	}
	if len(e.inRecovery) > 0 {
		part("every reachable host is in recovery (" + strings.Join(e.inRecovery, ", ") + ")")
	}
	if len(e.unprobed) > 0 {
		part("not probed yet: " + strings.Join(e.unprobed, ", "))
	}
	return b.String()
}

func (e *hostsError) Unwrap() []error {
	out := make([]error, 0, len(e.kinds)+len(e.failed))
	out = append(out, e.kinds...)
	for _, h := range e.failed {
		out = append(out, h)
	}
	return out
}

// resolveError names a failed host name lookup as such; it wraps the
// *net.DNSError (or whatever the lookup returned).
type resolveError struct {
	host string
	err  error
}

func (e *resolveError) Error() string {
	why := e.err.Error()
	var dns *net.DNSError
	if errors.As(e.err, &dns) {
		why = dns.Err // "no such host", "server misbehaving", "i/o timeout"
	}
	return "cannot resolve host " + e.host + ": " + why
}

func (e *resolveError) Unwrap() error { return e.err }

// nameResolveFailure wraps err, the failure of connecting to or probing
// host, in a resolveError when a name lookup failed and nothing named it
// yet: an inner driver reports that deep inside its connect error.
func nameResolveFailure(host string, err error) error {
	var dns *net.DNSError
	var res *resolveError
	if err == nil || !errors.As(err, &dns) || errors.As(err, &res) {
		return err
	}
	return &resolveError{host: host, err: err}
}

// redactedError is an error whose message showed the password: it shows
// it masked and keeps the cause reachable for errors.Is and errors.As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }

func (e *redactedError) Unwrap() error { return e.err }

// redactErr masks password in err's message (see libpqdsn.Redact), which
// comes from an inner driver or a server; err itself when it does not
// show it.
func redactErr(err error, password string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := libpqdsn.Redact(msg, password); red != msg {
		return &redactedError{msg: red, err: err}
	}
	return err
}

// Reasons a read could not be served by a replica.
const (
	ReasonTimeout   = "timeout"    // no replica replayed the position within the wait budget
	ReasonNoReplica = "no_replica" // no healthy replica within the lag bounds
	ReasonConflict  = "conflict"   // replay conflicts cancelled it on the replicas, or its statement kept conflicting lately
)
