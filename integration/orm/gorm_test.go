package orm_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/pgreplica/pgreplica"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"
)

// TestGORM runs the scenarios with GORM over gorm.io/driver/postgres, wired
// to an existing *sql.DB and by driver name, and with the settings that
// change which calls GORM makes: PrepareStmt (prepared statements cached on
// the *sql.DB) and SkipDefaultTransaction (Create and Update as bare
// statements, so INSERT … RETURNING arrives as a query outside any
// transaction).
func TestGORM(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  gorm.Config
	}{
		{"Conn", gorm.Config{}},
		{"PrepareStmt", gorm.Config{PrepareStmt: true}},
		{"SkipDefaultTransaction", gorm.Config{SkipDefaultTransaction: true}},
		{"PrepareStmt+SkipDefaultTransaction", gorm.Config{PrepareStmt: true, SkipDefaultTransaction: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := openDB(t)
			c.cfg.Logger = logger.Discard
			gdb, err := gorm.Open(postgres.New(postgres.Config{Conn: db}), &c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			testLibrary(t, db, gormItems{gdb})
		})
	}
	t.Run("DriverName", func(t *testing.T) {
		gdb, err := gorm.Open(postgres.New(postgres.Config{
			DriverName: pgreplica.DriverName,
			DSN:        dsn(t),
		}), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			t.Fatal(err)
		}
		db, err := gdb.DB()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		testLibrary(t, db, gormItems{gdb})
	})
}

type gormItems struct{ db *gorm.DB }

// gormItem is a row as GORM maps it (table "items" by naming convention).
type gormItem struct {
	ID   int64
	Name string `gorm:"not null"`
}

func (gormItem) TableName() string { return "items" }

func (g gormItems) migrate(ctx context.Context) error {
	return g.db.WithContext(ctx).AutoMigrate(&gormItem{})
}

func (g gormItems) create(ctx context.Context, name string) (int64, error) {
	it := gormItem{Name: name}
	err := g.db.WithContext(ctx).Create(&it).Error
	return it.ID, err
}

func (g gormItems) rename(ctx context.Context, id int64, name string) error {
	return g.db.WithContext(ctx).Model(&gormItem{ID: id}).Update("name", name).Error
}

func (g gormItems) name(ctx context.Context, id int64) (string, error) {
	var it gormItem
	err := g.db.WithContext(ctx).First(&it, id).Error
	return it.Name, err
}

func (g gormItems) port(ctx context.Context) (port int, err error) {
	err = g.db.WithContext(ctx).Raw("SELECT inet_server_port()").Scan(&port).Error
	return port, err
}

func (g gormItems) readOnlyTx(ctx context.Context, id int64) (name string, port int, err error) {
	err = g.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var it gormItem
		if err := tx.First(&it, id).Error; err != nil {
			return err
		}
		name = it.Name
		return tx.Raw("SELECT inet_server_port()").Scan(&port).Error
	}, &sql.TxOptions{ReadOnly: true})
	return name, port, err
}

func (g gormItems) appendInTx(ctx context.Context, id int64, suffix string) (port int, err error) {
	err = g.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var it gormItem
		if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).First(&it, id).Error; err != nil {
			return err
		}
		if err := tx.Model(&it).Update("name", it.Name+suffix).Error; err != nil {
			return err
		}
		return tx.Raw("SELECT inet_server_port()").Scan(&port).Error
	})
	return port, err
}
