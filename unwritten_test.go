package pgreplica

import (
	"context"
	"errors"
	"testing"

	"github.com/DATA-DOG/go-sqlmock"
)

// expectInsertLSN lets the primary answer lsn to one read of its current
// position (primaryPosition).
func (mc *mockCluster) expectInsertLSN(lsn string) {
	mc.mocks[0].ExpectQuery(insertLSNSQL).WillReturnRows(sqlmock.NewRows([]string{"lsn"}).AddRow(lsn))
}

// TestRouteLowersUnwrittenPosition: a token far ahead of the primary (at
// 0/180 when asked) is lowered to the primary's position, which the
// replica has: the read runs there, without waiting out the budget and
// falling back.
func TestRouteLowersUnwrittenPosition(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.refresh()
	mc.expectInsertLSN("0/180")
	mc.mocks[1].MatchExpectationsInOrder(false)
	mc.expectReplayChecks(1, "0/180")
	mc.mocks[1] = &lenientMock{mc.mocks[1]}
	mc.mocks[1].ExpectQuery("SELECT 1").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
	ctx := WithToken(context.Background(), Token{LSN: 0x9_00000000, SystemID: mc.sysid})
	var x int
	if err := mc.db.QueryRowContext(ctx, "SELECT 1").Scan(&x); err != nil {
		t.Fatal(err)
	}
	if st := mc.c.Stats(); st.FallbackReads != 0 || st.ReplicaReads != 1 {
		t.Fatalf("%d fallbacks, %d replica reads; want the replica's", st.FallbackReads, st.ReplicaReads)
	}
}

// TestSessionUnreachableSettles: a session whose write position could not
// be read before its primary went away holds a position no server
// reaches (resolvePending). Its next read lowers it to the primary's
// position now, in the session too: the read after it costs no statement
// on the primary, and both run on the replica.
func TestSessionUnreachableSettles(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.refresh()
	sess := NewSession()
	sess.advance(unreachableLSN, 1, mc.sysid)
	ctx := WithSession(context.Background(), sess)
	mc.expectInsertLSN("0/180") // once: the second read must not ask
	mc.mocks[1].MatchExpectationsInOrder(false)
	mc.expectReplayChecks(1, "0/180")
	mc.mocks[1] = &lenientMock{mc.mocks[1]}
	for range 2 {
		mc.mocks[1].ExpectQuery("SELECT 1").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
	}
	for i := range 2 {
		var x int
		if err := mc.db.QueryRowContext(ctx, "SELECT 1").Scan(&x); err != nil {
			t.Fatalf("read %d: %v", i+1, err)
		}
		if got, _ := sess.lsnFor(mc.sysid); got != 0x180 {
			t.Fatalf("after read %d the session is at %s, want the primary's 0/180", i+1, got)
		}
	}
	if st := mc.c.Stats(); st.FallbackReads != 0 || st.ReplicaReads != 2 {
		t.Fatalf("%d fallbacks, %d replica reads; want both on the replica", st.FallbackReads, st.ReplicaReads)
	}
}

// TestRouteKeepsWrittenPosition: a position ahead of what the process
// knows of the primary but not of the primary itself (a write of another
// process) is waited for, then read on the primary: never lowered.
func TestRouteKeepsWrittenPosition(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.refresh()
	mc.expectInsertLSN("A/0")
	mc.mocks[1].MatchExpectationsInOrder(false)
	mc.expectReplayChecks(1, "0/180")
	mc.mocks[1] = &lenientMock{mc.mocks[1]}
	mc.mocks[0].ExpectQuery("SELECT 1").WillReturnRows(sqlmock.NewRows([]string{"x"}).AddRow(1))
	ctx := WithToken(context.Background(), Token{LSN: 0x9_00000000, SystemID: mc.sysid})
	var x int
	if err := mc.db.QueryRowContext(ctx, "SELECT 1").Scan(&x); err != nil {
		t.Fatal(err)
	}
	if st := mc.c.Stats(); st.FallbackReads != 1 {
		t.Fatalf("%d fallbacks, want the primary's", st.FallbackReads)
	}
}

// TestCheckToken: positions at or below what the process knows of the
// primary cost no statement; one ahead of it costs a read of the
// primary's position, and is refused when still ahead; a token of other
// clusters only is refused.
func TestCheckToken(t *testing.T) {
	mc := newMockCluster(t, 1, nil)
	mc.refresh() // the primary known at 0/100
	mc.expectInsertLSN("0/180")
	mc.expectInsertLSN("0/190")
	me, other := mc.sysid, mc.sysid+1
	far := LSN(0x9_00000000)
	for _, tc := range []struct {
		name string
		tok  Token
		want error
	}{
		{"empty", Token{}, nil},
		{"known", Token{LSN: 0x50, SystemID: me}, nil},
		{"far future", Token{LSN: far, SystemID: me}, errTokenAhead},      // reads 0/180
		{"below the position read", Token{LSN: 0x170, SystemID: me}, nil}, // no statement
		{"far future, cluster not known", Token{LSN: far}, errTokenAhead}, // reads 0/190
		{"another cluster", Token{LSN: 0x50, SystemID: other}, errTokenForeign},
		{"another cluster, ahead", Token{LSN: far, SystemID: other}, errTokenForeign},
		{"this and another cluster", Token{LSN: far, SystemID: other, Others: []Position{{SystemID: me, LSN: 0x60}}}, nil},
		{"overflow", Token{LSN: 0x60, SystemID: other, Overflow: true, Others: []Position{{SystemID: me, LSN: 0x60}}}, nil},
	} {
		err := mc.c.CheckToken(context.Background(), tc.tok)
		if err != tc.want || err != nil && !errors.Is(err, ErrBadToken) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
