package orm_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/pgreplica/pgreplica"
)

// TestSqlx runs the scenarios with sqlx, wired both ways it can learn that
// pgreplica speaks PostgreSQL's $n placeholders.
func TestSqlx(t *testing.T) {
	t.Run("NewDb", func(t *testing.T) {
		db := openDB(t)
		// The driver name given here only picks the bind style.
		testLibrary(t, db, sqlxItems{sqlx.NewDb(db, "postgres")})
	})
	t.Run("BindDriver", func(t *testing.T) {
		sqlx.BindDriver(pgreplica.DriverName, sqlx.DOLLAR)
		dbx, err := sqlx.Open(pgreplica.DriverName, dsn(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dbx.Close() })
		if dbx.Rebind("?") != "$1" {
			t.Fatalf("Rebind after BindDriver gives %q", dbx.Rebind("?"))
		}
		testLibrary(t, dbx.DB, sqlxItems{dbx})
	})
}

type sqlxItems struct{ db *sqlx.DB }

// sqlxItem is a row as sqlx maps it.
type sqlxItem struct {
	ID   int64  `db:"id"`
	Name string `db:"name"`
}

func (s sqlxItems) migrate(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, "CREATE TABLE items (id bigserial PRIMARY KEY, name text NOT NULL)")
	return err
}

func (s sqlxItems) create(ctx context.Context, name string) (id int64, err error) {
	// Rebind turns ? into the driver's placeholders ($1).
	err = s.db.GetContext(ctx, &id, s.db.Rebind("INSERT INTO items (name) VALUES (?) RETURNING id"), name)
	return id, err
}

func (s sqlxItems) rename(ctx context.Context, id int64, name string) error {
	_, err := s.db.NamedExecContext(ctx, "UPDATE items SET name = :name WHERE id = :id", sqlxItem{ID: id, Name: name})
	return err
}

func (s sqlxItems) name(ctx context.Context, id int64) (string, error) {
	var it sqlxItem
	err := s.db.GetContext(ctx, &it, s.db.Rebind("SELECT id, name FROM items WHERE id = ?"), id)
	return it.Name, err
}

func (s sqlxItems) port(ctx context.Context) (port int, err error) {
	err = s.db.GetContext(ctx, &port, "SELECT inet_server_port()")
	return port, err
}

func (s sqlxItems) readOnlyTx(ctx context.Context, id int64) (name string, port int, err error) {
	tx, err := s.db.BeginTxx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return "", 0, err
	}
	defer tx.Rollback()
	var it sqlxItem
	if err := tx.GetContext(ctx, &it, "SELECT id, name FROM items WHERE id = $1", id); err != nil {
		return "", 0, err
	}
	if err := tx.GetContext(ctx, &port, "SELECT inet_server_port()"); err != nil {
		return "", 0, err
	}
	return it.Name, port, tx.Commit()
}

func (s sqlxItems) appendInTx(ctx context.Context, id int64, suffix string) (port int, err error) {
	tx, err := s.db.BeginTxx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var it sqlxItem
	if err := tx.GetContext(ctx, &it, "SELECT id, name FROM items WHERE id = $1 FOR UPDATE", id); err != nil {
		return 0, err
	}
	it.Name += suffix
	if _, err := tx.NamedExecContext(ctx, "UPDATE items SET name = :name WHERE id = :id", it); err != nil {
		return 0, err
	}
	if err := tx.GetContext(ctx, &port, "SELECT inet_server_port()"); err != nil {
		return 0, err
	}
	return port, tx.Commit()
}
