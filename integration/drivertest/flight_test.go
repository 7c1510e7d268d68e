package drivertest

import (
	"database/sql"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/integration/itest"
)

// flightTypesSQL answers two rows of every type whose database/sql value
// pgx's stdlib shapes (and a few it leaves as text), NULLs and both
// parameters included.
const flightTypesSQL = `SELECT inet_server_port() AS port, n, true AS b, '\x00ff'::bytea AS ba, 7::oid AS o,
 '2024-02-29'::date AS d, 'infinity'::date AS dinf, 1.5::float4 AS f4, 2.25::float8 AS f8, 3::int2 AS i2,
 4::int4 AS i4, 5::int8 AS i8, '{"a": 1}'::json AS j, '{"b": 2}'::jsonb AS jb,
 '2024-01-02 03:04:05.678'::timestamp AS ts, '2024-01-02 03:04:05.678+02'::timestamptz AS tstz,
 12.345::numeric(10,3) AS num, 'txt'::text AS t, 'vc'::varchar(12) AS vc, 'c'::char(3) AS bpc,
 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS u, '1 day 02:00'::interval AS iv, ARRAY[1,2]::int[] AS arr,
 '10.0.0.1'::inet AS ip, B'101'::varbit(5) AS vb, '12'::xid AS x, NULL::int AS nul,
 CASE WHEN n = 2 THEN NULL ELSE 'x' END AS maybe, $1::text AS p1, $2::int8 + n AS p2
 FROM generate_series(1, 2) n`

// TestFlightRowsMatchStdlib: a read that carried its replay check in its
// own flight (the monitor looks once an hour, so no replica is known to
// have the session's write) returns the values and column types pgx's
// stdlib returns for the same query on the same replica, in each query
// mode that pipelines, and cost no check of its own.
func TestFlightRowsMatchStdlib(t *testing.T) {
	cluster.Need(t)
	for _, mode := range []string{"cache_statement", "cache_describe", "describe_exec", "exec"} {
		t.Run(mode, func(t *testing.T) {
			ctx := ctxFor(t)
			db, c := itest.Open(t, cluster.DSN()+"&application_name="+appName(t)+
				"&tuning_monitor_interval=1h&tuning_hedge_delay=-1s&default_query_exec_mode="+mode)
			// The first probes go at once, then none for an hour: a
			// replica's first answer arriving after the write has caught
			// up (a slow start on a loaded machine) would let the read
			// skip its check.
			awaitProbed(t, db)
			tbl := table(t, db)
			sess := pgreplica.NewSession()
			sctx := pgreplica.WithSession(ctx, sess)
			for i := range 3 { // the second and third read reuse what the first learnt
				if _, err := db.ExecContext(sctx, "INSERT INTO "+tbl+" (v) VALUES ('x')"); err != nil {
					t.Fatal(err)
				}
				sess.LSN() // the write's position: the read needs it
				if err := cluster.WaitCaughtUp(ctx); err != nil {
					t.Fatal(err)
				}
				before := c.Stats()
				rows, err := db.QueryContext(sctx, flightTypesSQL, "param", int64(40))
				got := readTable(t, rows, err)
				after := c.Stats()
				if after.FlightChecks != before.FlightChecks+1 || after.ReplayChecks != before.ReplayChecks ||
					after.ReplicaReads != before.ReplicaReads+1 {
					t.Fatalf("read %d: %d checks in flight, %d before the read, %d replica reads; want 1, 0, 1",
						i, after.FlightChecks-before.FlightChecks, after.ReplayChecks-before.ReplayChecks, after.ReplicaReads-before.ReplicaReads)
				}
				port := got.rows[0][0].(int64)
				plain, err := sql.Open("pgx", cluster.NodeDSN(nodeOf(t, int(port)))+"&default_query_exec_mode="+mode)
				if err != nil {
					t.Fatal(err)
				}
				rows, err = plain.QueryContext(ctx, flightTypesSQL, "param", int64(40))
				want := readTable(t, rows, err)
				plain.Close()
				got.mustEqual(t, want)
			}
		})
	}
}

// answer is what database/sql shows of a query's answer: its columns,
// their types as ColumnTypes reports them, and the values scanned into any.
type answer struct {
	columns []string
	types   []string
	rows    [][]any
}

func readTable(t *testing.T, rows *sql.Rows, err error) answer {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var a answer
	if a.columns, err = rows.Columns(); err != nil {
		t.Fatal(err)
	}
	cts, err := rows.ColumnTypes()
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range cts {
		length, hasLength := ct.Length()
		prec, scale, hasDecimal := ct.DecimalSize()
		nullable, hasNullable := ct.Nullable()
		a.types = append(a.types, fmt.Sprintf("%s len=%d/%v dec=%d,%d/%v null=%v/%v scan=%v",
			ct.DatabaseTypeName(), length, hasLength, prec, scale, hasDecimal, nullable, hasNullable, ct.ScanType()))
	}
	for rows.Next() {
		vals := make([]any, len(a.columns))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		a.rows = append(a.rows, vals)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(a.rows) == 0 {
		t.Fatal("no rows")
	}
	return a
}

func (a answer) mustEqual(t *testing.T, want answer) {
	t.Helper()
	if !reflect.DeepEqual(a.columns, want.columns) {
		t.Fatalf("columns %q, stdlib's %q", a.columns, want.columns)
	}
	for i := range a.types {
		if a.types[i] != want.types[i] {
			t.Errorf("column %s: %s, stdlib's %s", a.columns[i], a.types[i], want.types[i])
		}
	}
	if len(a.rows) != len(want.rows) {
		t.Fatalf("%d rows, stdlib's %d", len(a.rows), len(want.rows))
	}
	for r := range a.rows {
		for i := range a.rows[r] {
			g, w := a.rows[r][i], want.rows[r][i]
			if !reflect.DeepEqual(g, w) {
				t.Errorf("row %d column %s: %#v (%T), stdlib's %#v (%T)", r, a.columns[i], g, g, w, w)
			}
		}
	}
}

// TestFlightErrors: a read in flight that fails reports the server's
// error as a read through stdlib does, before any row (a statement the
// server refuses) or after some (an error mid-stream), and leaves a
// connection that serves the next read.
func TestFlightErrors(t *testing.T) {
	cluster.Need(t)
	ctx := ctxFor(t)
	db, c := itest.Open(t, cluster.DSN()+"&application_name="+appName(t)+"&tuning_monitor_interval=1h&tuning_hedge_delay=-1s")
	tbl := table(t, db)
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	write := func() {
		t.Helper()
		if _, err := db.ExecContext(sctx, "INSERT INTO "+tbl+" (v) VALUES ('x')"); err != nil {
			t.Fatal(err)
		}
		sess.LSN()
		if err := cluster.WaitCaughtUp(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write()
	flights := c.Stats().FlightChecks
	if _, err := db.QueryContext(sctx, "SELECT no_such_column FROM "+tbl); err == nil || !strings.Contains(err.Error(), "no_such_column") {
		t.Fatalf("a read of a missing column: %v", err)
	}
	write()
	rows, err := db.QueryContext(sctx, "SELECT 1 / (n - 2) FROM generate_series(1, 3) n")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err == nil || !strings.Contains(err.Error(), "division by zero") || n != 1 {
		t.Fatalf("an error after the first row: %d rows, %v", n, err)
	}
	rows.Close()
	write()
	var got int
	if err := db.QueryRowContext(sctx, "SELECT count(*) FROM "+tbl).Scan(&got); err != nil || got != 3 {
		t.Fatalf("the read after: %d, %v", got, err)
	}
	if d := c.Stats().FlightChecks - flights; d < 2 {
		t.Fatalf("%d reads went in flight, want the reads after each write to", d)
	}
}

// TestFlightWrongArgumentCount: a read in flight with too few arguments
// fails with pgx's own words for it.
func TestFlightWrongArgumentCount(t *testing.T) {
	cluster.Need(t)
	ctx := ctxFor(t)
	db, _ := itest.Open(t, cluster.DSN()+"&application_name="+appName(t)+"&tuning_monitor_interval=1h&tuning_hedge_delay=-1s")
	plain, err := sql.Open("pgx", cluster.NodeDSN(cluster.Primary()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	tbl := table(t, db)
	sess := pgreplica.NewSession()
	sctx := pgreplica.WithSession(ctx, sess)
	if _, err := db.ExecContext(sctx, "INSERT INTO "+tbl+" (v) VALUES ('x')"); err != nil {
		t.Fatal(err)
	}
	sess.LSN()
	if err := cluster.WaitCaughtUp(ctx); err != nil {
		t.Fatal(err)
	}
	q := "SELECT v FROM " + tbl + " WHERE id = $1 AND v = $2"
	_, got := db.QueryContext(sctx, q, 1)
	_, want := plain.QueryContext(ctx, q, 1)
	if got == nil || want == nil || got.Error() != want.Error() {
		t.Fatalf("too few arguments: %v, stdlib: %v", got, want)
	}
}
