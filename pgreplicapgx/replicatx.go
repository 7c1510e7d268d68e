package pgreplicapgx

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/internal/pgxroute"
)

// txOp begins a transaction on the connection the router chose
// (pgxroute.GuardedOp; the router guards only a read-only transaction).
type txOp struct {
	ctx   context.Context
	opts  pgx.TxOptions
	inner pgx.Tx
}

func (o *txOp) Run(c *pgx.Conn) (err error) {
	o.inner, err = c.BeginTx(o.ctx, o.opts)
	return err
}

// RunGuarded begins the transaction in the same flight as a read of the
// replica's replay position: a pipeline of the read, a sync, BEGIN and a
// sync, so that the read runs in a transaction of its own, before BEGIN
// (a repeatable-read snapshot is taken after it, never before). pgx's
// BeginTx would cost a round trip of its own, so the transaction is the
// handle's (replicaTx). When the replica has not replayed need, the
// transaction is rolled back and it reports pgxroute.ErrBehind.
func (o *txOp) RunGuarded(c *pgx.Conn, need pgxroute.Need) (uint64, error) {
	begin := beginSQL(o.opts)
	ctx, span := need.Trace.StartQuery(o.ctx, c, begin, nil) // the BEGIN, as pgx's BeginTx traces it
	replayed, err := beginChecked(ctx, c.PgConn(), begin)
	if err != nil {
		span.End(pgconn.CommandTag{}, err)
	} else {
		span.End(pgconn.NewCommandTag("BEGIN"), nil)
	}
	if err == nil && !need.Met(uint64(replayed)) {
		err = pgxroute.ErrBehind
	}
	if err != nil {
		if c.PgConn().TxStatus() != 'I' && !c.IsClosed() {
			if _, rerr := c.Exec(o.ctx, "rollback"); rerr != nil {
				return uint64(replayed), rerr // not ErrBehind: the connection is in doubt
			}
		}
		return uint64(replayed), err
	}
	t := &replicaTx{commitQuery: o.opts.CommitQuery}
	t.txStatements = txStatements{conn: c, ended: func() bool { return t.closed }}
	o.inner = t
	return uint64(replayed), nil
}

// beginChecked sends the replay read and BEGIN in one pipeline and
// returns the position read. A server error in either is returned (the
// other still ran: the caller looks at the transaction status); any other
// error leaves the connection broken, as pgconn does.
func beginChecked(ctx context.Context, pc *pgconn.PgConn, begin string) (pgreplica.LSN, error) {
	pl := pc.StartPipeline(ctx)
	pl.SendQueryParams(replaySQL, nil, nil, nil, nil)
	pl.SendPipelineSync()
	pl.SendQueryParams(begin, nil, nil, nil, nil)
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		return 0, errors.Join(err, pl.Close())
	}
	var (
		replayed pgreplica.LSN
		errs     [2]error // of the read, of BEGIN
		step     int
	)
	for step < 2 {
		res, err := pl.GetResults()
		var pgErr *pgconn.PgError
		switch r := res.(type) {
		case nil:
			if err == nil {
				step = 2 // nothing more (the pipeline ended early)
			} else if errors.As(err, &pgErr) {
				errs[step] = err // the server skips to the sync
			} else {
				pl.Close()
				return 0, err
			}
		case *pgconn.ResultReader:
			got := r.Read()
			switch {
			case got.Err != nil:
				errs[step] = got.Err
			case step == 0 && len(got.Rows) == 1 && len(got.Rows[0]) == 1:
				replayed, errs[0] = pgreplica.ParseLSN(string(got.Rows[0][0]))
			}
		case *pgconn.PipelineSync:
			step++
		}
	}
	if err := pl.Close(); err != nil {
		return 0, err
	}
	if err := errors.Join(errs[0], errs[1]); err != nil {
		return 0, err
	}
	return replayed, nil
}

// beginSQL is the BEGIN statement of opts, as pgx writes it.
func beginSQL(opts pgx.TxOptions) string {
	if opts.BeginQuery != "" {
		return opts.BeginQuery
	}
	var b strings.Builder
	b.WriteString("begin")
	if opts.IsoLevel != "" {
		b.WriteString(" isolation level ")
		b.WriteString(string(opts.IsoLevel))
	}
	if opts.AccessMode != "" {
		b.WriteString(" ")
		b.WriteString(string(opts.AccessMode))
	}
	if opts.DeferrableMode != "" {
		b.WriteString(" ")
		b.WriteString(string(opts.DeferrableMode))
	}
	return b.String()
}

// replicaTx is a transaction the handle began itself (txOp.RunGuarded).
// It behaves as the transactions pgx.Conn.BeginTx returns: statements
// run on the connection, Begin makes a savepoint, Commit reports
// pgx.ErrTxCommitRollback when the server rolled back, and every method
// after Commit or Rollback reports pgx.ErrTxClosed.
type replicaTx struct {
	txStatements
	commitQuery string
	savepoints  int64
	closed      bool
	// lo is a pgx transaction for LargeObjects, made on first use.
	lo pgx.Tx
}

func (t *replicaTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if t.closed {
		return nil, pgx.ErrTxClosed
	}
	t.savepoints++
	sp := &savepoint{tx: t, name: "sp_" + strconv.FormatInt(t.savepoints, 10)}
	sp.txStatements = txStatements{conn: t.conn, ended: func() bool { return sp.closed || t.closed }}
	if _, err := t.conn.Exec(ctx, "savepoint "+sp.name); err != nil {
		return nil, err
	}
	return sp, nil
}

func (t *replicaTx) Commit(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	if t.lo != nil {
		t.closed = true
		return t.lo.Commit(ctx)
	}
	q := "commit"
	if t.commitQuery != "" {
		q = t.commitQuery
	}
	tag, err := t.conn.Exec(ctx, q)
	t.closed = true
	switch {
	case err != nil:
		if t.conn.PgConn().TxStatus() != 'I' {
			_ = t.conn.Close(ctx) // the transaction's state is unknown
		}
		return err
	case tag.String() == "ROLLBACK":
		return pgx.ErrTxCommitRollback
	}
	return nil
}

func (t *replicaTx) Rollback(ctx context.Context) error {
	if t.closed {
		return pgx.ErrTxClosed
	}
	if t.lo != nil {
		t.closed = true
		return t.lo.Rollback(ctx)
	}
	_, err := t.conn.Exec(ctx, "rollback")
	t.closed = true
	if err != nil {
		_ = t.conn.Close(ctx) // the transaction's state is unknown
	}
	return err
}

// LargeObjects needs a transaction of pgx's own (pgx.LargeObjects cannot
// be made outside pgx): the first call makes one over this transaction,
// with an empty statement as its BEGIN (it changes nothing and succeeds
// even in a failed transaction): a round trip that only large-object
// users pay. That transaction then ends this one (its Commit and Rollback
// end the whole transaction), so that its large objects report
// pgx.ErrTxClosed afterwards, as pgx's do. When it cannot be made (the
// connection is broken, or the transaction already ended), the large
// objects returned are pgx's zero value, which must not be used.
func (t *replicaTx) LargeObjects() pgx.LargeObjects {
	if t.lo == nil && !t.closed {
		lo, err := t.conn.BeginTx(context.Background(), pgx.TxOptions{BeginQuery: " ", CommitQuery: t.commitQuery})
		if err == nil {
			t.lo = lo
		}
	}
	if t.lo == nil {
		return pgx.LargeObjects{}
	}
	return t.lo.LargeObjects()
}

// txStatements run a transaction's statements on its connection, and
// report pgx.ErrTxClosed once it ended.
type txStatements struct {
	conn  *pgx.Conn
	ended func() bool
}

func (t txStatements) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.ended() {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return t.conn.Exec(ctx, sql, args...)
}

func (t txStatements) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.ended() {
		return errRows{pgx.ErrTxClosed}, pgx.ErrTxClosed
	}
	return t.conn.Query(ctx, sql, args...)
}

func (t txStatements) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.ended() {
		return errRow{pgx.ErrTxClosed}
	}
	return t.conn.QueryRow(ctx, sql, args...)
}

func (t txStatements) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.ended() {
		return pgx.FailedBatchResults(b, pgx.ErrTxClosed)
	}
	return t.conn.SendBatch(ctx, b)
}

func (t txStatements) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if t.ended() {
		return 0, pgx.ErrTxClosed
	}
	return t.conn.CopyFrom(ctx, table, columns, src)
}

func (t txStatements) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if t.ended() {
		return nil, pgx.ErrTxClosed
	}
	return t.conn.Prepare(ctx, name, sql)
}

func (t txStatements) Conn() *pgx.Conn { return t.conn }

// savepoint is a transaction nested in a replicaTx, as pgx's: Commit
// releases the savepoint, Rollback rolls back to it.
type savepoint struct {
	txStatements
	tx     *replicaTx
	name   string
	closed bool
}

func (s *savepoint) Begin(ctx context.Context) (pgx.Tx, error) {
	if s.closed {
		return nil, pgx.ErrTxClosed
	}
	return s.tx.Begin(ctx)
}

func (s *savepoint) Commit(ctx context.Context) error {
	return s.end(ctx, "release savepoint ")
}

func (s *savepoint) Rollback(ctx context.Context) error {
	return s.end(ctx, "rollback to savepoint ")
}

func (s *savepoint) end(ctx context.Context, verb string) error {
	if s.closed {
		return pgx.ErrTxClosed
	}
	_, err := s.Exec(ctx, verb+s.name)
	s.closed = true
	return err
}

func (s *savepoint) LargeObjects() pgx.LargeObjects { return s.tx.LargeObjects() }

var (
	_ pgx.Tx             = (*replicaTx)(nil)
	_ pgx.Tx             = (*savepoint)(nil)
	_ pgxroute.GuardedOp = (*txOp)(nil)
)
