package pgreplica

import (
	"context"
	"reflect"

	"github.com/jackc/pgx/v5"
)

// pgx's hooks (Config.Pgx): the configuration and callbacks an
// application gives pgx and pgxpool, applied to the connections pgreplica
// opens for it, and kept from the monitor's where they would flood or
// fail it.

// PgxHooks are pgx's and pgxpool's hooks, by their names and with their
// types, for the connections pgreplica opens with the pgx inner driver
// (Config.Pgx): ConnConfig as pgx's stdlib.OpenDB takes it, BeforeConnect
// and AfterConnect as its OptionBeforeConnect and OptionAfterConnect (and
// pgxpool.Config) take them, PrepareConn, AfterRelease and BeforeClose as
// pgxpool.Config does. Package pgreplicapgx fills them from its Config.
//
// Every connection the application's statements use runs them, on the
// primary and on every replica. The monitor's own connections (its
// probes; a capture of write positions when no pooled connection is idle)
// are made from ConnConfig and BeforeConnect as well, so that a rotated
// password or an IAM token lets them log in, but they run no
// AfterConnect, and nothing the monitor sends, on its own connections or
// on idle pooled ones it borrows, reaches the Tracer (a probe every
// 250ms on every server would flood the traces). PrepareConn and
// AfterRelease do not run when the monitor borrows a pooled connection.
//
// Handles opened with the same ConnConfig (or, without one, the same
// *PgxHooks) share the monitor's connections to a server, as handles on
// the same DSN do; a handle with another ConnConfig or BeforeConnect
// probes on connections of its own, which its hooks made.
type PgxHooks struct {
	// ConnConfig, when set, is every connection's configuration (a
	// *pgx.ConnConfig from pgx.ParseConfig: Tracer, TLSConfig, DialFunc,
	// LookupFunc, RuntimeParams, User, Password, Database, ...) but for
	// where it goes: each server's Host and Port are those of
	// Config.Hosts (its LookupFunc resolves their names, unless
	// Config.LookupFunc is set), and the TLS configurations pgx made for ConnConfig's
	// first host (TLSConfig, and the Fallbacks to that same host that
	// sslmode=prefer or allow adds) serve every server, their ServerName
	// set to the server's host where it was the first host's. The
	// Fallbacks to other hosts are not used: Config.Hosts lists the
	// servers. Config.User, Password, Database and Params must then be
	// empty (ConnConfig holds them), and ValidateConnect nil (what
	// target_session_attrs sets: pgreplica finds the roles itself, and a
	// check that refuses replicas would refuse them every read). Unset,
	// each server's configuration is parsed from its DSN.
	ConnConfig *pgx.ConnConfig

	// BeforeConnect is called before each new connection, with a copy of
	// the configuration it is about to use, which it may change (a
	// rotated password, a token); an error fails the connection.
	BeforeConnect func(context.Context, *pgx.ConnConfig) error

	// AfterConnect is called once a new connection is established,
	// before any statement of the application uses it: register types
	// (LoadType, RegisterType), SET per-connection settings. An error
	// closes it and fails the borrow that wanted it.
	AfterConnect func(context.Context, *pgx.Conn) error

	// PrepareConn is called before a pooled connection is lent to a
	// statement or a transaction, with the caller's context, after the
	// pool's own health check. As in pgxpool: true and a nil error lend
	// it; true and an error give it back to the pool and fail the borrow
	// with the error; false and an error close it and fail the borrow;
	// false and a nil error close it and borrow another (a few times at
	// most). A read whose borrow failed tries the other servers its plan
	// allows, as after a refused connection, and fails with the error
	// when none is left.
	PrepareConn func(context.Context, *pgx.Conn) (bool, error)

	// AfterRelease is called after a statement gave a connection back,
	// before it returns to the pool, unless it is closed anyway (broken,
	// in a transaction, past its lifetime, or carrying session state);
	// false closes it. As in pgxpool it runs on a goroutine of its own,
	// and the connection is idle again once it returned.
	AfterRelease func(*pgx.Conn) bool

	// BeforeClose is called right before a pooled connection is closed.
	BeforeClose func(*pgx.Conn)

	// key is what the monitor's connections are made from beyond the
	// DSN (see proberKey), set by clone.
	key any
}

// clone returns a copy of h that later changes to h (and to its
// ConnConfig) do not reach; nil for nil.
func (h *PgxHooks) clone() *PgxHooks {
	if h == nil {
		return nil
	}
	c := *h
	if c.key == nil {
		switch {
		case h.ConnConfig != nil:
			c.key = h.ConnConfig
		case h.BeforeConnect != nil:
			c.key = h
		}
	}
	if h.ConnConfig != nil {
		c.ConnConfig = h.ConnConfig.Copy()
	}
	return &c
}

// monitorKey says, for the prober registry, what makes the monitor's
// connections beyond the DSN: nil when the hooks do not touch them
// (neither ConnConfig nor BeforeConnect), so that such handles share
// probers with the DSN's.
func (h *PgxHooks) monitorKey() any {
	if h == nil {
		return nil
	}
	return h.key
}

// validate reports what c's hooks may not be (see PgxHooks); nil for
// none.
func (h *PgxHooks) validate(c *Config) error {
	if h == nil {
		return nil
	}
	if c.Driver == DriverPq {
		return errBadConfigf("Pgx: pgx's hooks need the pgx inner driver, not %q", string(c.Driver))
	}
	cc := h.ConnConfig
	if cc == nil {
		return nil
	}
	switch {
	case c.User != "" || c.Password != "" || c.Database != "" || len(c.Params) > 0:
		return errBadConfigf("Pgx.ConnConfig is set: leave Config.User, Password, Database and Params empty and set them in it")
	case cc.ValidateConnect != nil:
		return errBadConfigf("Pgx.ConnConfig.ValidateConnect is set (target_session_attrs?): pgreplica finds each server's role itself")
	case !parsedConnConfig(cc):
		return errBadConfigf("Pgx.ConnConfig was not made by pgx.ParseConfig, which pgx requires")
	}
	return nil
}

// parsedConnConfig reports whether pgx.ParseConfig made cc, as
// pgx.ConnectConfig requires (it panics otherwise); true when this pgx
// does not say.
func parsedConnConfig(cc *pgx.ConnConfig) bool {
	f := reflect.ValueOf(cc).Elem().FieldByName("createdByParseConfig")
	return !f.IsValid() || f.Kind() != reflect.Bool || f.Bool()
}

// flightsFor reports whether reads through database/sql can carry their
// check in their own flight on connections made from cfg: pgx, with a
// query mode that uses the extended protocol.
func flightsFor(cfg *Config) bool {
	if cfg.Driver == DriverPq {
		return false
	}
	if cfg.Pgx != nil && cfg.Pgx.ConnConfig != nil {
		return cfg.Pgx.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeSimpleProtocol
	}
	return cfg.Params["default_query_exec_mode"] != "simple_protocol"
}
