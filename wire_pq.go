package pgreplica

import (
	"database/sql/driver"
	"reflect"
)

// pqWire is the wire of a lib/pq connection: genericWire, plus the
// process id of its start-up message, which lib/pq keeps for cancel
// requests but does not export. It is read once per connection, by
// reflection: a lib/pq without the field reports 0 (unknown), and a
// pooler in front of it is then seen only as an endpoint.
type pqWire struct {
	genericWire
	pid uint32
}

// isPqConn reports whether c is a lib/pq connection.
func isPqConn(c driver.Conn) bool {
	t := reflect.TypeOf(c)
	return t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "github.com/lib/pq" && t.Elem().Name() == "conn"
}

func newPqWire(c driver.Conn) *pqWire {
	w := &pqWire{}
	if f := reflect.ValueOf(c).Elem().FieldByName("pid"); f.IsValid() && f.CanInt() {
		w.pid = uint32(f.Int())
	}
	return w
}

func (w *pqWire) backendPID() uint32 { return w.pid }
