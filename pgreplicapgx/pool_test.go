package pgreplicapgx

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgreplica/pgreplica"
)

// dbtx is the interface sqlc generates for sql_package pgx/v5 (with
// :copyfrom and :batch queries): the pool and a Conn satisfy it.
type dbtx interface {
	Exec(context.Context, string, ...interface{}) (pgconn.CommandTag, error)
	Query(context.Context, string, ...interface{}) (pgx.Rows, error)
	QueryRow(context.Context, string, ...interface{}) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

var (
	_ dbtx = (*Pool)(nil)
	_ dbtx = (*Conn)(nil)
	_ dbtx = pgx.Tx(nil)
)

func TestBeginsTx(t *testing.T) {
	for q, want := range map[string]bool{
		"begin":                              true,
		"BEGIN ISOLATION LEVEL SERIALIZABLE": true,
		"  start transaction read only":      true,
		"begin;":                             true,
		"beginning":                          false,
		"SELECT 1":                           false,
		"starting_point":                     false,
		"":                                   false,
		"begin isolation level repeatable read read only": true,
	} {
		if got := beginsTx(q); got != want {
			t.Errorf("beginsTx(%q) = %v, want %v", q, got, want)
		}
	}
}

// TestNewRefusesWithoutConnecting: configuration errors come from New,
// typed, before any connection; the unreachable host of a valid DSN is
// reported by the first call.
func TestNewRefusesWithoutConnecting(t *testing.T) {
	ctx := context.Background()
	if _, err := NewWithConfig(ctx, &Config{Routing: pgreplica.Config{Hosts: []pgreplica.Host{{Addr: "h"}}, Driver: pgreplica.DriverPq}}); !errors.Is(err, pgreplica.ErrBadConfig) {
		t.Errorf("lib/pq: %v, want ErrBadConfig", err)
	}
	if _, err := New(ctx, "postgres://%zz@h/db"); !errors.Is(err, pgreplica.ErrBadDSN) {
		t.Errorf("malformed DSN: %v, want ErrBadDSN", err)
	}
	p, err := New(ctx, "postgres://u@127.0.0.1:1/db?sslmode=disable&pgreplica_connect_timeout=500ms")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Ping(ctx); !errors.Is(err, pgreplica.ErrNoReachableHost) {
		t.Errorf("Ping: %v, want ErrNoReachableHost", err)
	}
	rows, err := p.Query(ctx, "SELECT 1")
	if !errors.Is(err, pgreplica.ErrNoReachableHost) || rows == nil || rows.Err() != err || rows.Next() {
		t.Errorf("Query: %v, %v; want ErrNoReachableHost and rows that report it", rows, err)
	}
	rows.Close()
	if err := p.QueryRow(ctx, "SELECT 1").Scan(new(int)); !errors.Is(err, pgreplica.ErrNoReachableHost) {
		t.Errorf("QueryRow: %v", err)
	}
	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	if err := p.SendBatch(ctx, b).Close(); !errors.Is(err, pgreplica.ErrNoReachableHost) {
		t.Errorf("SendBatch: %v", err)
	}
	if _, err := p.Acquire(ctx); !errors.Is(err, pgreplica.ErrNoReachableHost) {
		t.Errorf("Acquire: %v", err)
	}
}
