package drivertest

import (
	"database/sql"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
	"github.com/pgreplica/pgreplica"
)

// Errors that name the cause and keep their type: what a new user gets
// from Ping with a wrong password, a role or database that does not exist,
// or a primary whose host name is mistyped.

// pingErr opens dsn with the inner driver and returns Ping's error.
func pingErr(t *testing.T, inner, dsn string) error {
	t.Helper()
	db, err := sql.Open(pgreplica.DriverName, dsn+"&pgreplica_driver="+inner+"&application_name="+appName(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	err = db.PingContext(ctxFor(t))
	t.Logf("%s: Ping: %v", inner, err)
	return err
}

// withLogin returns the cluster's DSN with another user, password and
// database.
func withLogin(user, password, database string) string {
	login := user
	if password != "" {
		login += ":" + password
	}
	dsn := strings.Replace(cluster.DSN(), "postgres://postgres@", "postgres://"+login+"@", 1)
	return strings.Replace(dsn, "/postgres?", "/"+database+"?", 1)
}

// serverError finds the inner driver's own error in err, as code that
// branches on SQLSTATE would.
func serverError(inner string, err error) (code string, ok bool) {
	if inner == "pq" {
		var pe *pq.Error
		if errors.As(err, &pe) {
			return string(pe.Code), true
		}
		return "", false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, true
	}
	return "", false
}

// checkEveryHostOnce fails t unless err names every host of the cluster
// exactly once and says cause exactly once.
func checkEveryHostOnce(t *testing.T, err error, cause string) {
	t.Helper()
	msg := err.Error()
	for i := range cluster.Len() {
		if n := strings.Count(msg, "127.0.0.1:"+itoa(cluster.Port(i))); n != 1 {
			t.Errorf("node %d is named %d times in %q", i, n, msg)
		}
	}
	if n := strings.Count(msg, cause); n != 1 {
		t.Errorf("%q appears %d times in %q", cause, n, msg)
	}
}

// TestErrorsAuth: a wrong password and a role that does not exist fail
// with ErrNoReachableHost and ErrAuth, the server's error reachable with
// errors.As (SQLSTATE 28P01, 28000), every host named once with the cause
// once, and no password in the message. A database that does not exist is
// no authentication failure (3D000). Both inner drivers.
func TestErrorsAuth(t *testing.T) {
	cluster.Need(t)
	ctx := ctxFor(t)
	const role, password, wrong = "pgr_pw_role", "right-horse-battery", "wrong-horse-staple"
	// scram-sha-256 explicitly: PostgreSQL 13 stores md5 by default, which
	// the scram-sha-256 rule below would refuse even with the right password.
	mustExec(t, cluster.Primary(), "SET password_encryption = 'scram-sha-256'; DROP ROLE IF EXISTS "+role+"; CREATE ROLE "+role+" LOGIN PASSWORD '"+password+"'")
	t.Cleanup(func() { mustExec(t, cluster.Primary(), "DROP ROLE IF EXISTS "+role) })
	if err := cluster.SetHBA(ctx, "host all "+role+" all scram-sha-256"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.SetHBA(ctxFor(t)); err != nil {
			t.Error(err)
		}
	})
	if err := cluster.WaitCaughtUp(ctx); err != nil { // the role is on the replicas
		t.Fatal(err)
	}

	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			if err := pingErr(t, inner, withLogin(role, password, "postgres")); err != nil {
				t.Fatalf("the right password: %v", err)
			}

			err := pingErr(t, inner, withLogin(role, wrong, "postgres"))
			if !errors.Is(err, pgreplica.ErrNoReachableHost) || !errors.Is(err, pgreplica.ErrAuth) {
				t.Fatalf("wrong password: %v; want ErrNoReachableHost and ErrAuth", err)
			}
			if code, ok := serverError(inner, err); code != "28P01" {
				t.Errorf("wrong password: errors.As found the %s error %v with SQLSTATE %q, want 28P01", inner, ok, code)
			}
			var he *pgreplica.HostError
			if !errors.As(err, &he) {
				t.Errorf("wrong password: no *HostError in %v", err)
			}
			checkEveryHostOnce(t, err, "password authentication failed")
			if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), password) {
				t.Errorf("a password shows in %q", err)
			}
			if len(err.Error()) > 250 {
				t.Errorf("%d characters for one cause on %d hosts: %q", len(err.Error()), cluster.Len(), err)
			}

			err = pingErr(t, inner, withLogin("pgr_ghost", "", "postgres"))
			if !errors.Is(err, pgreplica.ErrNoReachableHost) || !errors.Is(err, pgreplica.ErrAuth) {
				t.Fatalf("missing role: %v; want ErrNoReachableHost and ErrAuth", err)
			}
			if code, ok := serverError(inner, err); code != "28000" {
				t.Errorf("missing role: errors.As found the %s error %v with SQLSTATE %q, want 28000", inner, ok, code)
			}
			checkEveryHostOnce(t, err, `role "pgr_ghost" does not exist`)

			err = pingErr(t, inner, withLogin("postgres", "", "pgr_nodb"))
			if !errors.Is(err, pgreplica.ErrNoReachableHost) || errors.Is(err, pgreplica.ErrAuth) {
				t.Fatalf("missing database: %v; want ErrNoReachableHost, not ErrAuth", err)
			}
			if code, ok := serverError(inner, err); code != "3D000" {
				t.Errorf("missing database: errors.As found the %s error %v with SQLSTATE %q, want 3D000", inner, ok, code)
			}
			checkEveryHostOnce(t, err, `database "pgr_nodb" does not exist`)
		})
	}
}

// TestErrorsMistypedPrimary: the primary's host name does not resolve
// (.invalid never does), the replicas answer. Writes fail with
// ErrNoPrimary saying the name could not be resolved, with the
// *net.DNSError reachable; reads still work.
func TestErrorsMistypedPrimary(t *testing.T) {
	cluster.Need(t)
	const typo = "nonexistent.invalid"
	dsn := "postgres://postgres@" + typo + ":" + itoa(cluster.Port(0)) + ",127.0.0.1:" + itoa(cluster.Port(1)) +
		",127.0.0.1:" + itoa(cluster.Port(2)) + "/postgres?sslmode=disable"
	for _, inner := range drivers {
		t.Run(inner, func(t *testing.T) {
			err := pingErr(t, inner, dsn)
			if !errors.Is(err, pgreplica.ErrNoPrimary) || errors.Is(err, pgreplica.ErrNoReachableHost) {
				t.Fatalf("Ping: %v; want ErrNoPrimary", err)
			}
			if want := typo + ":" + itoa(cluster.Port(0)) + ": cannot resolve host " + typo; !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not say %q", err, want)
			}
			if !strings.Contains(err.Error(), "in recovery") {
				t.Errorf("%q does not say the other hosts are in recovery", err)
			}
			var dns *net.DNSError
			if !errors.As(err, &dns) || dns.Name != typo {
				t.Errorf("errors.As finds no *net.DNSError for %s in %v", typo, err)
			}

			db, err := sql.Open(pgreplica.DriverName, dsn+"&pgreplica_driver="+inner)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var x int
			if err := db.QueryRowContext(ctxFor(t), "SELECT 1").Scan(&x); err != nil {
				t.Errorf("a read without a primary: %v", err)
			}
			_, err = db.ExecContext(ctxFor(t), "CREATE TABLE pgr_never (a int)")
			if !errors.Is(err, pgreplica.ErrNoPrimary) || !strings.Contains(err.Error(), "cannot resolve host "+typo) {
				t.Errorf("a write: %v; want ErrNoPrimary naming the failed lookup", err)
			}
		})
	}
}
