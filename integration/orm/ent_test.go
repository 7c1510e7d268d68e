package orm_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/pgreplica/pgreplica/integration/orm/ent"
	"github.com/pgreplica/pgreplica/integration/orm/ent/item"
)

// TestEnt runs the scenarios with ent's generated client (./ent) over an
// existing *sql.DB.
func TestEnt(t *testing.T) {
	db := openDB(t)
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	testLibrary(t, db, entItems{client})
}

type entItems struct{ client *ent.Client }

func (e entItems) migrate(ctx context.Context) error {
	return e.client.Schema.Create(ctx)
}

func (e entItems) create(ctx context.Context, name string) (int64, error) {
	it, err := e.client.Item.Create().SetName(name).Save(ctx)
	if err != nil {
		return 0, err
	}
	return int64(it.ID), nil
}

func (e entItems) rename(ctx context.Context, id int64, name string) error {
	return e.client.Item.UpdateOneID(int(id)).SetName(name).Exec(ctx)
}

func (e entItems) name(ctx context.Context, id int64) (string, error) {
	it, err := e.client.Item.Get(ctx, int(id))
	if err != nil {
		return "", err
	}
	return it.Name, nil
}

// queryer is what the sql/execquery feature adds to ent.Client and ent.Tx.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// serverPort runs SELECT inet_server_port() through q.
func serverPort(ctx context.Context, q queryer) (port int, err error) {
	rows, err := q.QueryContext(ctx, "SELECT inet_server_port()")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return 0, err
		}
		return 0, errors.New("SELECT inet_server_port() returned no row")
	}
	if err := rows.Scan(&port); err != nil {
		return 0, err
	}
	return port, rows.Close()
}

func (e entItems) port(ctx context.Context) (int, error) {
	return serverPort(ctx, e.client)
}

func (e entItems) readOnlyTx(ctx context.Context, id int64) (name string, port int, err error) {
	tx, err := e.client.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return "", 0, err
	}
	defer tx.Rollback()
	it, err := tx.Item.Get(ctx, int(id))
	if err != nil {
		return "", 0, err
	}
	if port, err = serverPort(ctx, tx); err != nil {
		return "", 0, err
	}
	return it.Name, port, tx.Commit()
}

func (e entItems) appendInTx(ctx context.Context, id int64, suffix string) (port int, err error) {
	tx, err := e.client.Tx(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	it, err := tx.Item.Query().Where(item.ID(int(id))).ForUpdate().Only(ctx)
	if err != nil {
		return 0, err
	}
	if err := tx.Item.UpdateOne(it).SetName(it.Name + suffix).Exec(ctx); err != nil {
		return 0, err
	}
	if port, err = serverPort(ctx, tx); err != nil {
		return 0, err
	}
	return port, tx.Commit()
}
