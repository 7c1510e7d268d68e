package orm_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// TestBun runs the scenarios with bun and its PostgreSQL dialect.
func TestBun(t *testing.T) {
	db := openDB(t)
	testLibrary(t, db, bunItems{bun.NewDB(db, pgdialect.New())})
}

type bunItems struct{ db *bun.DB }

// bunItem is a row as bun maps it.
type bunItem struct {
	bun.BaseModel `bun:"table:items"`

	ID   int64  `bun:",pk,autoincrement"`
	Name string `bun:",notnull"`
}

func (b bunItems) migrate(ctx context.Context) error {
	_, err := b.db.NewCreateTable().Model((*bunItem)(nil)).Exec(ctx)
	return err
}

func (b bunItems) create(ctx context.Context, name string) (int64, error) {
	it := bunItem{Name: name}
	// pgdialect adds RETURNING "id" and bun scans it into it.ID.
	_, err := b.db.NewInsert().Model(&it).Exec(ctx)
	return it.ID, err
}

func (b bunItems) rename(ctx context.Context, id int64, name string) error {
	_, err := b.db.NewUpdate().Model(&bunItem{ID: id, Name: name}).Column("name").WherePK().Exec(ctx)
	return err
}

func (b bunItems) name(ctx context.Context, id int64) (string, error) {
	it := bunItem{ID: id}
	err := b.db.NewSelect().Model(&it).WherePK().Scan(ctx)
	return it.Name, err
}

func (b bunItems) port(ctx context.Context) (port int, err error) {
	err = b.db.NewRaw("SELECT inet_server_port()").Scan(ctx, &port)
	return port, err
}

func (b bunItems) readOnlyTx(ctx context.Context, id int64) (name string, port int, err error) {
	err = b.db.RunInTx(ctx, &sql.TxOptions{ReadOnly: true}, func(ctx context.Context, tx bun.Tx) error {
		it := bunItem{ID: id}
		if err := tx.NewSelect().Model(&it).WherePK().Scan(ctx); err != nil {
			return err
		}
		name = it.Name
		return tx.NewRaw("SELECT inet_server_port()").Scan(ctx, &port)
	})
	return name, port, err
}

func (b bunItems) appendInTx(ctx context.Context, id int64, suffix string) (port int, err error) {
	err = b.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		it := bunItem{ID: id}
		if err := tx.NewSelect().Model(&it).WherePK().For("UPDATE").Scan(ctx); err != nil {
			return err
		}
		it.Name += suffix
		if _, err := tx.NewUpdate().Model(&it).Column("name").WherePK().Exec(ctx); err != nil {
			return err
		}
		return tx.NewRaw("SELECT inet_server_port()").Scan(ctx, &port)
	})
	return port, err
}
