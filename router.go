package pgreplica

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/pgreplica/pgreplica/internal/lagtrack"
	"github.com/pgreplica/pgreplica/internal/stmtclass"
	"github.com/pgreplica/pgreplica/internal/stmtset"
)

// router routes every statement of a handle: it decides where a
// statement may run (plan.go), borrows a connection there (acquire.go,
// lease.go), runs it plainly, hedged or with its check in flight
// (route.go) and accounts for it once. It is the Connector's first part
// (connector.go), which makes it and starts and stops what it routes
// over; the doors call its methods as the Connector's. Its files call
// only each other and the world below them (the nodes, their pools and
// the topology the monitor publishes), never the doors.
type router struct {
	// What every statement reads comes first: these fields, settings, the
	// logger and the counters most reads add to share three cache lines
	// (TestHotFieldsLayout). The parts that serve only some statements,
	// or none, follow the counters.
	closed atomic.Bool
	pq     bool // the inner driver is lib/pq (Config.Driver)
	// flights: database/sql reads may carry their replay check in their
	// own flight (inflight.go).
	flights bool
	topo    atomic.Pointer[topology]
	// mark is this connector's handle on its cluster's process
	// watermarks; localMarks stand in while the cluster is unknown
	// (watermark.go).
	mark atomic.Pointer[watermark]
	// refused remembers statements a replica refused with SQLSTATE
	// 25006, so they go straight to the primary next time; conflicting
	// those that kept conflicting with replay, for a while (route.go).
	refused, conflicting stmtset.Set
	// hedges bounds and sends hedged reads (hedge.go).
	hedges   hedger
	settings settings
	log      *slog.Logger
	// picker chooses among the replicas that satisfy a read (choose).
	picker  Picker
	metrics metrics

	// fallbacks bounds concurrent reads that fell back to the primary
	// (fallback.go).
	fallbacks fallbackGate
	cfg       Config
	// nodes are the nodes routed over, copied on change (resolve.go):
	// nodeList reads them. A node keeps its slot (its idx) while it
	// is in the list; a retired one keeps it until a new node takes it.
	nodes atomic.Pointer[[]*node]
	mon   *monitor

	localMarks clusterMarks
	// capture runs the background capture of write positions, and a
	// capture's own connection (capture.go).
	capture capturer
	// now reads the primary's current position for the positions ahead
	// of every one known (unwritten.go).
	now primaryNow
	// primaryLSNs samples the primary's position for time lag.
	primaryLSNs lagtrack.Tracker
	// classes caches the classification of long statements.
	classes stmtclass.Cache
	// marks is the way to the cluster's process watermarks the monitor
	// publishes and raises them through (watermark.go).
	marks handleMarks

	// wg counts the goroutines Close waits for: the monitor's, and the
	// background captures (capture.go).
	wg sync.WaitGroup
}

// nodeList returns the nodes routed over now (see router.nodes).
func (r *router) nodeList() []*node { return *r.nodes.Load() }
