package pgreplica

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func mustParseConnConfig(t *testing.T, dsn string) *pgx.ConnConfig {
	t.Helper()
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// TestPgxHooksValidate: hooks only with pgx; a ConnConfig holds the
// credentials and parameters alone, comes from pgx.ParseConfig and checks
// no role.
func TestPgxHooksValidate(t *testing.T) {
	hosts := []Host{{Addr: "db1"}, {Addr: "db2"}}
	cc := mustParseConnConfig(t, "host=db1 user=app sslmode=disable")
	tsa := mustParseConnConfig(t, "host=db1 user=app target_session_attrs=read-write")
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" for valid
	}{
		{"hooks alone", Config{Hosts: hosts, User: "app", Pgx: &PgxHooks{AfterConnect: func(context.Context, *pgx.Conn) error { return nil }}}, ""},
		{"ConnConfig", Config{Hosts: hosts, Pgx: &PgxHooks{ConnConfig: cc}}, ""},
		{"lib/pq", Config{Hosts: hosts, Driver: DriverPq, Pgx: &PgxHooks{}}, "need the pgx inner driver"},
		{"ConnConfig and User", Config{Hosts: hosts, User: "app", Pgx: &PgxHooks{ConnConfig: cc}}, "leave Config.User"},
		{"ConnConfig and Params", Config{Hosts: hosts, Params: map[string]string{"sslmode": "disable"}, Pgx: &PgxHooks{ConnConfig: cc}}, "leave Config.User"},
		{"target_session_attrs", Config{Hosts: hosts, Pgx: &PgxHooks{ConnConfig: tsa}}, "ValidateConnect"},
		{"literal ConnConfig", Config{Hosts: hosts, Pgx: &PgxHooks{ConnConfig: &pgx.ConnConfig{}}}, "pgx.ParseConfig"},
	} {
		_, err := NewConnector(tc.cfg)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want ErrBadConfig saying %q", tc.name, err, tc.want)
		}
	}
}

// TestPgxHooksCopied: a Config's hooks and ConnConfig are the
// connector's own once it is made, and the monitor's connections are
// keyed by what the caller gave.
func TestPgxHooksCopied(t *testing.T) {
	cc := mustParseConnConfig(t, "host=db1 user=app sslmode=disable")
	h := &PgxHooks{ConnConfig: cc}
	got := Config{Hosts: []Host{{Addr: "db1"}}, Pgx: h}.withDefaults()
	cc.User, cc.RuntimeParams["search_path"] = "other", "x"
	if got.Pgx == h || got.Pgx.ConnConfig.User != "app" || got.Pgx.ConnConfig.RuntimeParams["search_path"] != "" {
		t.Errorf("the caller's later changes reach the copy: %+v", got.Pgx.ConnConfig)
	}
	if got.Pgx.monitorKey() != cc {
		t.Errorf("monitor key %v, want the caller's ConnConfig", got.Pgx.monitorKey())
	}
	after := &PgxHooks{AfterConnect: func(context.Context, *pgx.Conn) error { return nil }}
	if k := after.clone().monitorKey(); k != nil {
		t.Errorf("hooks that do not make connections key the monitor's: %v", k)
	}
	before := &PgxHooks{BeforeConnect: func(context.Context, *pgx.ConnConfig) error { return nil }}
	if k := before.clone().monitorKey(); k != before {
		t.Errorf("BeforeConnect: monitor key %v, want the hooks", k)
	}
}

// TestConnConfigForServer: ConnConfig serves each server with that
// server's host and port, its TLS name where pgx had set the first
// host's, the plaintext fallback of sslmode=prefer to the same server,
// and no fallback to the other hosts.
func TestConnConfigForServer(t *testing.T) {
	base := mustParseConnConfig(t, "host=db1,db2 port=5432,5433 user=app sslmode=prefer")
	base.RuntimeParams["application_name"] = "shop"
	server := mustParseConnConfig(t, "host=db2 port=5433")
	got := connConfigFor(base, server)
	if got.Host != "db2" || got.Port != 5433 || got.User != "app" || got.RuntimeParams["application_name"] != "shop" {
		t.Fatalf("got host %s port %d user %s params %v", got.Host, got.Port, got.User, got.RuntimeParams)
	}
	if got.TLSConfig == nil || got.TLSConfig.ServerName != "db2" || base.TLSConfig.ServerName != "db1" {
		t.Errorf("TLS server name %v (base's %q)", got.TLSConfig, base.TLSConfig.ServerName)
	}
	if len(got.Fallbacks) != 1 || *got.Fallbacks[0] != (pgconn.FallbackConfig{Host: "db2", Port: 5433}) {
		t.Errorf("fallbacks %+v, want the plaintext one to db2:5433", got.Fallbacks)
	}

	full := mustParseConnConfig(t, "host=db1 user=app sslmode=require sslsni=0")
	full.TLSConfig.ServerName = "proxy.example" // the application's own name: kept
	if got := connConfigFor(full, server); got.TLSConfig.ServerName != "proxy.example" || len(got.Fallbacks) != 0 {
		t.Errorf("the application's server name: %q, fallbacks %v", got.TLSConfig.ServerName, got.Fallbacks)
	}
	unix := mustParseConnConfig(t, "host=/run/postgresql")
	if got := connConfigFor(base, unix); got.TLSConfig != nil || got.Fallbacks != nil || got.Host != "/run/postgresql" {
		t.Errorf("Unix socket: TLS %v, fallbacks %v, host %s", got.TLSConfig, got.Fallbacks, got.Host)
	}
}

// TestPgxHooksAddress: the hosts' names are resolved by ConnConfig's
// LookupFunc unless Config.LookupFunc is set, and a node dialled at one
// address of its name keeps it whatever BeforeConnect does.
func TestPgxHooksAddress(t *testing.T) {
	cc := mustParseConnConfig(t, "host=db1 user=app sslmode=disable")
	mine := func(context.Context, string) ([]string, error) { return []string{"192.0.2.7"}, nil }
	cc.LookupFunc = mine
	got := Config{Hosts: []Host{{Addr: "db1"}}, Pgx: &PgxHooks{ConnConfig: cc}}.withDefaults()
	if addrs, _ := got.LookupFunc(context.Background(), "db1"); len(addrs) != 1 || addrs[0] != "192.0.2.7" {
		t.Errorf("Config.LookupFunc answers %v, want ConnConfig's", addrs)
	}
	theirs := LookupFunc(func(context.Context, string) ([]string, error) { return []string{"192.0.2.8"}, nil })
	got = Config{Hosts: []Host{{Addr: "db1"}}, LookupFunc: theirs, Pgx: &PgxHooks{ConnConfig: cc}}.withDefaults()
	if addrs, _ := got.LookupFunc(context.Background(), "db1"); addrs[0] != "192.0.2.8" {
		t.Errorf("Config.LookupFunc answers %v, want its own", addrs)
	}

	h := &PgxHooks{BeforeConnect: func(_ context.Context, cc *pgx.ConnConfig) error {
		cc.LookupFunc = mine
		return nil
	}}
	c := cc.Copy()
	if err := h.beforeConnect(context.Background(), c, "192.0.2.9"); err != nil {
		t.Fatal(err)
	}
	if addrs, _ := c.LookupFunc(context.Background(), "db1"); len(addrs) != 1 || addrs[0] != "192.0.2.9" {
		t.Errorf("the pinned node looks db1 up as %v", addrs)
	}
}
