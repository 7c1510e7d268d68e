package statustest

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// unreachableHost refuses connections at once: nothing listens on port 1.
const unreachableHost = "127.0.0.1:1"

// keepWriting commits a row on the primary every few milliseconds until the
// test ends, so that WAL moves and a delayed or paused replica falls behind.
func keepWriting(t *testing.T, ctx context.Context) {
	t.Helper()
	db, err := sql.Open("pgx", cluster.NodeDSN(cluster.Primary()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS status_writes (at timestamptz)`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_, _ = db.ExecContext(ctx, `INSERT INTO status_writes VALUES (now())`)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		db.Close()
	})
}

// TestStatusShowsPausedLaggingPrimaryAndUnreachable runs the status
// command on the shared cluster with replica 1 paused, replica 2 applying
// WAL 500ms late while writes go on, and an extra host nobody listens on.
func TestStatusShowsPausedLaggingPrimaryAndUnreachable(t *testing.T) {
	cluster.Need(t)
	ctx := testCtx(t, 90*time.Second)
	keepWriting(t, ctx)
	if err := cluster.PauseReplay(ctx, 1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.ResumeReplay(context.Background(), 1); err != nil {
			t.Error(err)
		}
	})
	if err := cluster.SetApplyDelay(ctx, 2, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cluster.SetApplyDelay(context.Background(), 2, 0); err != nil {
			t.Error(err)
		}
	})
	dsn := strings.Replace(cluster.DSN(), "/postgres?", ","+unreachableHost+"/postgres?", 1)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", cluster.Port(i)) }

	t.Run("json", func(t *testing.T) {
		by, out := statusJSON(t, ctx, dsn)
		if len(by) != 4 {
			t.Fatalf("want 4 distinct hosts, got:\n%s", out)
		}
		p, paused, delayed, down := by[addr(0)], by[addr(1)], by[addr(2)], by[unreachableHost]
		if p.Role != "primary" || p.State != "ok" || p.LSN == "" || p.Timeline == 0 || p.Conflicts == nil {
			t.Errorf("primary row: %+v", p)
		}
		if paused.Role != "replica" || !paused.ReplayPaused || paused.State != "streaming" {
			t.Errorf("paused replica row: %+v", paused)
		}
		if delayed.Role != "replica" || delayed.ReplayPaused || delayed.LagBytes == nil || *delayed.LagBytes == 0 ||
			delayed.LagMs == nil || *delayed.LagMs <= 0 {
			t.Errorf("delayed replica shows no lag: %+v", delayed)
		}
		if paused.Conflicts == nil || delayed.Conflicts == nil {
			t.Errorf("conflict counters missing: %+v / %+v", paused, delayed)
		}
		if down.State != "unreachable" || down.Error == "" || down.Reads || down.Conflicts != nil {
			t.Errorf("unreachable host row: %+v", down)
		}
	})

	t.Run("table", func(t *testing.T) {
		var out, errOut bytes.Buffer
		if code := run(ctx, []string{"status", dsn, "-sample", "500ms"}, &out, &errOut); code != exitOK {
			t.Fatalf("exit code %d; stderr:\n%s", code, errOut.String())
		}
		t.Log("\n" + out.String())
		by := map[string]map[string]string{}
		for _, r := range columns(t, out.String()) {
			by[r["NODE"]] = r
		}
		if r := by[addr(0)]; r["ROLE"] != "primary" || r["STATE"] != "ok" {
			t.Errorf("primary row: %v", r)
		}
		if r := by[addr(1)]; r["PAUSED"] != "yes" {
			t.Errorf("paused replica row: %v", r)
		}
		if r := by[addr(2)]; r["PAUSED"] != "no" || r["LAG"] == "0 B" || r["LAG"] == "-" {
			t.Errorf("delayed replica row: %v", r)
		}
		if r := by[unreachableHost]; r["STATE"] != "unreachable" || r["READS"] != "no" || !strings.Contains(r["WHY"], "unreachable") {
			t.Errorf("unreachable host row: %v", r)
		}
	})
}

// frameCounter is a stdout that cancels the watch after a few frames.
type frameCounter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	want   int
	cancel context.CancelFunc
}

func (f *frameCounter) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf.Write(p)
	if strings.Count(f.buf.String(), ansiHome) >= f.want {
		f.cancel()
	}
	return len(p), nil
}

// TestStatusWatchStopsOnCancel runs -watch until its context ends, as
// Ctrl-C ends it: it redraws in place, then exits 0 for a reachable
// cluster.
func TestStatusWatchStopsOnCancel(t *testing.T) {
	cluster.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := &frameCounter{want: 3, cancel: cancel}
	var errOut bytes.Buffer
	code := run(ctx, []string{"status", "-watch", "-interval", "100ms", cluster.DSN()}, out, &errOut)
	if code != exitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, errOut.String())
	}
	if ctx.Err() != context.Canceled {
		t.Fatalf("watch stopped by %v, not by cancellation", ctx.Err())
	}
	if got := out.buf.String(); strings.Count(got, ansiClearScreen) != 1 || !strings.Contains(got, "primary 127.0.0.1:") {
		t.Errorf("frames not redrawn in place:\n%q", got)
	}
}

// statusJSON runs `pgreplica status -json dsn` and returns its rows by
// host (failing if two rows name one host) and the raw output.
func statusJSON(t *testing.T, ctx context.Context, dsn string) (map[string]nodeReport, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"status", "-json", dsn}, &out, &errOut); code != exitOK {
		t.Fatalf("exit code %d; stderr:\n%s", code, errOut.String())
	}
	var nodes []nodeReport
	if err := json.Unmarshal(out.Bytes(), &nodes); err != nil {
		t.Fatalf("%v in:\n%s", err, out.String())
	}
	by := map[string]nodeReport{}
	for _, n := range nodes {
		if _, dup := by[n.Addr]; dup {
			t.Fatalf("host %s listed twice in:\n%s", n.Addr, out.String())
		}
		by[n.Addr] = n
	}
	return by, out.String()
}
