package pgreplica

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
)

// Reading a write's LSN. The value must be read after the COMMIT and be at
// or past the end of its record. For a synchronous commit the flush LSN is
// the tight choice (already flushed, so replicas will reach it). When the
// commit may have been asynchronous only the insert LSN is safe: the flush
// LSN is usually still below the commit record.
const (
	flushLSNSQL  = "SELECT pg_current_wal_flush_lsn()::text"
	insertLSNSQL = "SELECT pg_current_wal_insert_lsn()::text"
)

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

func lsnSQL(async bool) string {
	if async {
		return insertLSNSQL
	}
	return flushLSNSQL
}

// mayBeAsync reports whether a write on p may commit asynchronously.
func mayBeAsync(p *physical, cls stmtClass) bool {
	if p.asyncCommit || cls.asyncCommit {
		p.node.asyncSeen.Store(true)
		return true
	}
	st := p.node.status.Load()
	return st != nil && st.asyncDefault
}

// execCapture runs an autocommit write and reads its LSN. On pgx the LSN
// query is pipelined behind the write in its own sync segment (so it runs
// after the write's implicit commit) and costs no extra round trip.
func (c *Connector) execCapture(ctx context.Context, p *physical, query string, cls stmtClass, args []driver.NamedValue) (driver.Result, error) {
	async := mayBeAsync(p, cls)
	if sc, ok := p.conn.(*stdlib.Conn); ok && !cls.multi && (len(args) > 0 || cls.dml) {
		r, lsn, err := execPipelined(ctx, p, sc.Conn(), query, args, lsnSQL(async))
		if err != nil {
			return nil, err
		}
		c.observeWrite(ctx, p.node, lsn)
		return r, nil
	}
	r, err := execInner(ctx, p.conn, query, args)
	if err != nil {
		return nil, err
	}
	return r, c.captureAfter(ctx, p, async)
}

// execPipelined sends [write, Sync, LSN query, Sync] in one flight.
func execPipelined(ctx context.Context, p *physical, pc *pgx.Conn, query string, args []driver.NamedValue, lsnQuery string) (driver.Result, LSN, error) {
	sd, err := p.describe(ctx, pc, query)
	if err != nil {
		return nil, 0, err
	}
	vals := make([]any, len(args))
	for i := range args {
		vals[i] = args[i].Value
	}
	var eqb pgx.ExtendedQueryBuilder
	if err := eqb.Build(pc.TypeMap(), sd, vals); err != nil {
		return nil, 0, err
	}
	pl := pc.PgConn().StartPipeline(ctx)
	pl.SendQueryStatement(sd, eqb.ParamValues, eqb.ParamFormats, eqb.ResultFormats)
	pl.SendPipelineSync()
	pl.SendQueryParams(lsnQuery, nil, nil, nil, nil)
	if err := pl.Sync(); err != nil {
		pl.Close()
		return nil, 0, err
	}

	var tag pgconn.CommandTag
	var lsn LSN
	var firstErr error
	readers := 0
	for {
		res, err := pl.GetResults()
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			if pgconn.SafeToRetry(err) || pc.PgConn().IsClosed() {
				break
			}
			continue
		}
		switch r := res.(type) {
		case *pgconn.ResultReader:
			readers++
			if readers == 1 {
				tag, err = r.Close()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				continue
			}
			for r.NextRow() {
				if v := r.Values(); len(v) == 1 && firstErr == nil {
					lsn, err = ParseLSN(string(v[0]))
					if err != nil {
						firstErr = err
					}
				}
			}
			if _, err := r.Close(); err != nil && firstErr == nil {
				firstErr = err
			}
		case *pgconn.PipelineSync:
		case nil:
			goto done
		}
	}
done:
	if err := pl.Close(); err != nil && firstErr == nil {
		firstErr = err
	}
	if firstErr != nil {
		return nil, 0, firstErr
	}
	return driver.RowsAffected(tag.RowsAffected()), lsn, nil
}

// captureAfter reads the LSN on p after a write committed (one round trip).
func (c *Connector) captureAfter(ctx context.Context, p *physical, async bool) error {
	rows, err := queryInner(ctx, p.conn, lsnSQL(async), nil)
	if err != nil {
		return fmt.Errorf("pgreplica: reading the write's LSN: %w", err)
	}
	defer rows.Close()
	vals := make([]driver.Value, 1)
	if err := rows.Next(vals); err != nil {
		return fmt.Errorf("pgreplica: reading the write's LSN: %w", err)
	}
	lsn, err := lsnValue(vals[0])
	if err != nil {
		return err
	}
	c.observeWrite(ctx, p.node, lsn)
	return nil
}

// captureOnClose wraps the rows of a write sent through Query (INSERT …
// RETURNING) so its LSN is captured once the rows are done, and the
// connection is released after that (when release is set).
func (c *Connector) captureOnClose(ctx context.Context, p *physical, cls stmtClass, rows driver.Rows, release func(error)) driver.Rows {
	async := mayBeAsync(p, cls)
	return &routedRows{Rows: rows, onClose: func(err error) {
		if err == nil {
			err = c.captureAfter(context.WithoutCancel(ctx), p, async)
		}
		if release != nil {
			release(err)
		}
	}}
}

// commitCapture commits a transaction that wrote and reads the LSN after
// the COMMIT. On pgx both go in one simple query ("COMMIT; SELECT …"),
// which runs the SELECT after the commit completed: no extra round trip.
func (c *Connector) commitCapture(ctx context.Context, p *physical, inner driver.Tx, async bool) error {
	sc, ok := p.conn.(*stdlib.Conn)
	if !ok {
		if err := inner.Commit(); err != nil {
			return err
		}
		return c.captureAfter(ctx, p, async)
	}
	results, err := sc.Conn().PgConn().Exec(ctx, "COMMIT; "+lsnSQL(async)).ReadAll()
	if err != nil {
		return err
	}
	if len(results) != 2 || results[0].CommandTag.String() != "COMMIT" {
		// An aborted transaction answers COMMIT with ROLLBACK.
		return errCommitRolledBack
	}
	if len(results[1].Rows) != 1 || len(results[1].Rows[0]) != 1 {
		return errors.New("pgreplica: unexpected answer reading the commit LSN")
	}
	lsn, err := ParseLSN(string(results[1].Rows[0][0]))
	if err != nil {
		return err
	}
	c.observeWrite(ctx, p.node, lsn)
	return nil
}

var errCommitRolledBack = errors.New("pgreplica: commit failed: the transaction was rolled back")

// observeWrite raises the process watermark and the context's session.
func (c *Connector) observeWrite(ctx context.Context, n *node, lsn LSN) {
	lsn = reachableLSN(lsn)
	c.metrics.lsnCaptures.Add(1)
	for {
		cur := c.processLSN.Load()
		if uint64(lsn) <= cur || c.processLSN.CompareAndSwap(cur, uint64(lsn)) {
			break
		}
	}
	if req := requirementFrom(ctx); req != nil && req.session != nil {
		st := n.status.Load()
		var tl uint32
		var sysid uint64
		if st != nil {
			tl, sysid = st.timeline, st.sysid
		}
		req.session.advanceWrite(lsn, tl, sysid)
	}
}

// maxPrepared bounds the statements pgreplica prepares per connection for
// pipelined writes; past it they are deallocated and the cache restarts.
const maxPrepared = 256

// describe prepares query once per physical connection (pgx keeps the
// description), so a pipelined write costs one round trip like pgx's own
// statement cache.
func (p *physical) describe(ctx context.Context, pc *pgx.Conn, query string) (*pgconn.StatementDescription, error) {
	if sd, ok := p.prepared[query]; ok {
		return sd, nil
	}
	if len(p.prepared) >= maxPrepared {
		for q := range p.prepared {
			if err := pc.Deallocate(ctx, q); err != nil {
				return nil, err
			}
		}
		clear(p.prepared)
	}
	sd, err := pc.Prepare(ctx, query, query)
	if err != nil {
		return nil, err
	}
	if p.prepared == nil {
		p.prepared = make(map[string]*pgconn.StatementDescription)
	}
	p.prepared[query] = sd
	return sd, nil
}
