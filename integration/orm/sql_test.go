package orm_test

import (
	"context"
	"database/sql"
	"testing"
)

// TestDatabaseSQL runs the scenarios with plain database/sql: the baseline
// the libraries below build on.
func TestDatabaseSQL(t *testing.T) {
	db := openDB(t)
	testLibrary(t, db, sqlItems{db})
}

type sqlItems struct{ db *sql.DB }

func (s sqlItems) migrate(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, "CREATE TABLE items (id bigserial PRIMARY KEY, name text NOT NULL)")
	return err
}

func (s sqlItems) create(ctx context.Context, name string) (id int64, err error) {
	err = s.db.QueryRowContext(ctx, "INSERT INTO items (name) VALUES ($1) RETURNING id", name).Scan(&id)
	return id, err
}

func (s sqlItems) rename(ctx context.Context, id int64, name string) error {
	_, err := s.db.ExecContext(ctx, "UPDATE items SET name = $1 WHERE id = $2", name, id)
	return err
}

func (s sqlItems) name(ctx context.Context, id int64) (name string, err error) {
	err = s.db.QueryRowContext(ctx, "SELECT name FROM items WHERE id = $1", id).Scan(&name)
	return name, err
}

func (s sqlItems) port(ctx context.Context) (port int, err error) {
	err = s.db.QueryRowContext(ctx, "SELECT inet_server_port()").Scan(&port)
	return port, err
}

func (s sqlItems) readOnlyTx(ctx context.Context, id int64) (name string, port int, err error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return "", 0, err
	}
	defer tx.Rollback()
	err = tx.QueryRowContext(ctx, "SELECT name, inet_server_port() FROM items WHERE id = $1", id).Scan(&name, &port)
	if err != nil {
		return "", 0, err
	}
	return name, port, tx.Commit()
}

func (s sqlItems) appendInTx(ctx context.Context, id int64, suffix string) (port int, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var name string
	err = tx.QueryRowContext(ctx, "SELECT name, inet_server_port() FROM items WHERE id = $1 FOR UPDATE", id).Scan(&name, &port)
	if err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE items SET name = $1 WHERE id = $2", name+suffix, id); err != nil {
		return 0, err
	}
	return port, tx.Commit()
}
