// Package schema is the ent schema of the ORM integration tests: one
// table of named items, enough to show writes, reads and transactions
// through pgreplica.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
)

// Item is a row of the items table.
type Item struct {
	ent.Schema
}

// Fields of the Item.
func (Item) Fields() []ent.Field {
	return []ent.Field{
		field.String("name"),
	}
}
