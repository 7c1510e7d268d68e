package pgreplicapgx

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgreplica/pgreplica"
)

// TestParseConfigAsPgxpool: ParseConfig puts the connection settings in
// ConnConfig (every host, the credentials, the parameters), pgxpool's
// pool options (or pgreplica's) in their pgxpool fields, and pgreplica's
// options in Routing, leaving Routing's connection fields empty.
func TestParseConfigAsPgxpool(t *testing.T) {
	cfg, err := ParseConfig("postgres://app:s3cret@db1,db2:5433/shop?sslmode=disable&application_name=svc" +
		"&pool_max_conns=7&pool_max_conn_idle_time=90s&pgreplica_conn_max_lifetime=2h&pgreplica_wait_budget=80ms")
	if err != nil {
		t.Fatal(err)
	}
	cc := cfg.ConnConfig
	if cc.Host != "db1" || cc.Port != 5432 || len(cc.Fallbacks) != 1 || cc.Fallbacks[0].Host != "db2" || cc.Fallbacks[0].Port != 5433 {
		t.Errorf("hosts %s:%d %+v", cc.Host, cc.Port, cc.Fallbacks)
	}
	if cc.User != "app" || cc.Password != "s3cret" || cc.Database != "shop" || cc.TLSConfig != nil || cc.RuntimeParams["application_name"] != "svc" {
		t.Errorf("connection settings %s %s %s %v %v", cc.User, cc.Password, cc.Database, cc.TLSConfig, cc.RuntimeParams)
	}
	for k := range cc.RuntimeParams {
		if strings.HasPrefix(k, "pool_") || strings.HasPrefix(k, "pgreplica_") {
			t.Errorf("%s reaches the server", k)
		}
	}
	if cfg.MaxConns != 7 || cfg.MaxConnIdleTime != 90*time.Second || cfg.MaxConnLifetime != 2*time.Hour {
		t.Errorf("pool settings %d %v %v", cfg.MaxConns, cfg.MaxConnIdleTime, cfg.MaxConnLifetime)
	}
	r := cfg.Routing
	if len(r.Hosts) != 2 || r.WaitBudget != 80*time.Millisecond || r.User != "" || r.Password != "" || r.Database != "" || r.Params != nil ||
		r.MaxConnsPerHost != 0 || r.ConnMaxLifetime != 0 || r.ConnMaxIdleTime != 0 {
		t.Errorf("routing %+v", r)
	}
	got, err := cfg.routing()
	if err != nil {
		t.Fatal(err)
	}
	if got.MaxConnsPerHost != 7 || got.ConnMaxIdleTime != 90*time.Second || got.ConnMaxLifetime != 2*time.Hour || got.Pgx == nil || got.Pgx.ConnConfig != cc {
		t.Errorf("the pgreplica.Config made of it: %+v", got)
	}
	p, err := NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
}

// TestParseConfigRefuses: pgxpool's options without a counterpart, a
// pool setting given twice, bad values, and the same setting in both
// places of a Config are refused, typed.
func TestParseConfigRefuses(t *testing.T) {
	for _, dsn := range []string{
		"postgres://db1/x?pool_min_conns=2",
		"postgres://db1/x?pool_health_check_period=1m",
		"postgres://db1/x?pool_max_conns=0",
		"postgres://db1/x?pool_max_conns=4&pgreplica_max_conns_per_host=5",
		"postgres://db1/x?pool_max_conn_lifetime=soon",
	} {
		if _, err := ParseConfig(dsn); !errors.Is(err, pgreplica.ErrBadDSN) {
			t.Errorf("%s: %v, want ErrBadDSN", dsn, err)
		}
		if _, err := New(context.Background(), dsn); !errors.Is(err, pgreplica.ErrBadDSN) {
			t.Errorf("New(%s): %v, want ErrBadDSN", dsn, err)
		}
	}
	cfg, err := ParseConfig("postgres://db1,db2/x?pool_max_conns=4")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Routing.MaxConnsPerHost = 5
	if _, err := NewWithConfig(context.Background(), cfg); !errors.Is(err, pgreplica.ErrBadConfig) {
		t.Errorf("MaxConns and Routing.MaxConnsPerHost: %v", err)
	}
	cfg.Routing.MaxConnsPerHost = 0
	cfg.Routing.Pgx = &pgreplica.PgxHooks{}
	if _, err := NewWithConfig(context.Background(), cfg); !errors.Is(err, pgreplica.ErrBadConfig) {
		t.Errorf("hooks in Routing.Pgx too: %v", err)
	}
	cfg.Routing.Pgx = nil
	cfg.Routing.User = "app"
	if _, err := NewWithConfig(context.Background(), cfg); !errors.Is(err, pgreplica.ErrBadConfig) {
		t.Errorf("Routing.User beside ConnConfig: %v", err)
	}
	if _, err := NewWithConfig(context.Background(), nil); !errors.Is(err, pgreplica.ErrBadConfig) {
		t.Errorf("nil Config: %v", err)
	}
}

// TestParseConfigHooksAsPgxpool: the program of a pgxpool user, with
// only the package name changed, compiles and builds a pool.
func TestParseConfigHooksAsPgxpool(t *testing.T) {
	cfg, err := ParseConfig("postgres://app@db1,db2/shop?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = "app"
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error { cc.Password = "token"; return nil }
	cfg.AfterConnect = func(context.Context, *pgx.Conn) error { return nil }
	cfg.PrepareConn = func(context.Context, *pgx.Conn) (bool, error) { return true, nil }
	cfg.AfterRelease = func(*pgx.Conn) bool { return true }
	cfg.BeforeClose = func(*pgx.Conn) {}
	cfg.MaxConns = 20
	p, err := NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
}
