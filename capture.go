package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
)

// Reading a write's LSN: after every committed write, the process
// watermark and the plan's session rise to a position at or past the end
// of its commit record (see lsnSQL), read after the commit.

// WAL page geometry of every PostgreSQL build we support: 8 kB pages,
// whose first page of a segment carries a long header.
const (
	walPageSize       = 8192
	walShortHeader    = 24 // SizeOfXLogShortPHD
	walLongHeader     = 40 // SizeOfXLogLongPHD
	walMinSegmentSize = 1 << 20
)

// reachableLSN maps an insert position that sits just past a page header
// back to the page boundary. When the last record ended exactly at a page
// end, pg_current_wal_insert_lsn() points past the next page's header, but
// a replica's replay position stops at the boundary and only passes it
// when the next record arrives — on an idle primary, seconds later. The
// bytes in between are a header, not data, so the boundary is as good.
func reachableLSN(l LSN) LSN {
	off := uint64(l) % walPageSize
	switch {
	case off == walShortHeader:
		return l - walShortHeader
	case off == walLongHeader && uint64(l)%walMinSegmentSize == walLongHeader:
		return l - walLongHeader
	}
	return l
}

// mayCommitAsync reports whether a write on p may commit asynchronously:
// the session or the statement turned synchronous_commit off, or it is off
// by default for our role and database.
func (p *physical) mayCommitAsync(t *topology, cls stmtClass) bool {
	if p.asyncCommit || cls.asyncCommit {
		p.node.asyncSeen.Store(true)
		return true
	}
	return t.nodes[p.node.idx].status.asyncDefault
}

// execCapture runs an autocommit write and records its LSN.
func (c *Connector) execCapture(ctx context.Context, pl *plan, p *physical, query string, cls stmtClass, args []driver.NamedValue) (driver.Result, error) {
	r, lsn, err := p.wire.execCapture(ctx, p, query, cls, args, lsnSQL(p.mayCommitAsync(pl.topo, cls)))
	if err != nil {
		return nil, err
	}
	c.observeWrite(pl, lsn)
	return r, nil
}

// captureAfter reads and records the LSN on p after a write committed
// (one round trip): for writes whose results the caller read first.
func (c *Connector) captureAfter(ctx context.Context, pl *plan, p *physical) error {
	lsn, err := queryLSN(ctx, p.conn, lsnSQL(p.mayCommitAsync(pl.topo, stmtClass{})))
	if err != nil {
		return fmt.Errorf("pgreplica: reading the write's LSN: %w", err)
	}
	c.observeWrite(pl, lsn)
	return nil
}

// commitCapture commits a transaction that wrote and records the LSN
// read after the COMMIT.
func (c *Connector) commitCapture(ctx context.Context, pl *plan, p *physical, tx driver.Tx, async bool) error {
	lsn, err := p.wire.commitCapture(ctx, p, tx, lsnSQL(async || p.mayCommitAsync(pl.topo, stmtClass{})))
	if err != nil {
		return err
	}
	c.observeWrite(pl, lsn)
	return nil
}

var errCommitRolledBack = errors.New("pgreplica: commit failed: the transaction was rolled back")

// observeWrite raises the process watermark of the cluster and the plan's
// session.
func (c *Connector) observeWrite(pl *plan, lsn LSN) {
	lsn = reachableLSN(lsn)
	c.metrics.lsnCaptures.Add(1)
	c.raiseProcessLSN(pl.topo.sysid, lsn, pl.session == nil)
	pl.session.advanceWrite(lsn, pl.topo.timeline, pl.topo.sysid)
}
