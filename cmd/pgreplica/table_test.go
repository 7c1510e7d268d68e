package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgreplica/pgreplica"
)

// sampleReport is a cluster with a primary, a paused replica, a lagging
// one and an unreachable host.
func sampleReport() report {
	lsn := func(s string) pgreplica.LSN {
		l, err := pgreplica.ParseLSN(s)
		if err != nil {
			panic(err)
		}
		return l
	}
	nodes := []pgreplica.NodeStatus{
		{Addr: "10.0.0.1:5432", Zone: "a", Role: "primary", Timeline: 1, LSN: lsn("0/3000148"),
			Why: "primary: writes, and reads that require it or fall back", RTT: 800 * time.Microsecond},
		{Addr: "10.0.0.2:5432", Zone: "b", Role: "replica", Timeline: 1, LSN: lsn("0/2000000"), ReceiveLSN: lsn("0/3000148"),
			ReplayPaused: true, Receiver: "streaming", SyncState: "async", LagBytes: 16777544, LagTime: 2500 * time.Millisecond,
			Reads: true, Why: "replay paused: serves only reads it is already fresh enough for"},
		{Addr: "10.0.0.3:5432", Role: "replica", Timeline: 1, LSN: lsn("0/3000000"), Receiver: "streaming",
			SyncState: "async", LagBytes: 328, LagTime: 512 * time.Millisecond, Reads: true},
		{Addr: "10.0.0.4:5432", Role: "unknown", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")},
			Why: "unreachable: dial tcp: connection refused"},
	}
	rep := report{At: time.Date(2025, 1, 2, 15, 4, 5, 0, time.UTC), Hosts: len(nodes)}
	for _, n := range nodes {
		rep.Nodes = append(rep.Nodes, nodeRow(n))
	}
	for i, c := range []int64{0, 3, 0} {
		rep.Nodes[i].Conflicts = &c
	}
	rep.Nodes[2].Conflicts = nil
	rep.Nodes[2].ConflictsError = "reading pg_stat_database_conflicts: permission denied"
	return rep
}

// columns splits a rendered table into cells keyed by header.
func columns(t *testing.T, out string) []map[string]string {
	t.Helper()
	var header []string
	var rows []map[string]string
	sep := regexp.MustCompile(`\s{2,}`)
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "NODE ") {
			header = sep.Split(line, -1)
			continue
		}
		if header == nil || strings.TrimSpace(line) == "" || strings.HasPrefix(line, "conflicts of") {
			continue
		}
		cells := sep.Split(line, -1)
		row := map[string]string{}
		for i, h := range header {
			if i < len(cells) {
				row[h] = cells[i]
			}
		}
		rows = append(rows, row)
	}
	if header == nil {
		t.Fatalf("no header in:\n%s", out)
	}
	return rows
}

func TestStatusTable(t *testing.T) {
	var b bytes.Buffer
	if err := renderStatus(&b, sampleReport()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log("\n" + out)
	if !strings.HasPrefix(out, "4 hosts at 15:04:05: primary 10.0.0.1:5432; 2 of 2 reachable replicas take reads\n") {
		t.Errorf("summary line wrong:\n%s", out)
	}
	rows := columns(t, out)
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	want := []map[string]string{
		{"NODE": "10.0.0.1:5432", "ZONE": "a", "ROLE": "primary", "STATE": "ok", "TL": "1", "LSN": "0/3000148", "LAG": "-", "PAUSED": "-", "CONFLICTS": "0", "READS": "no"},
		{"NODE": "10.0.0.2:5432", "ROLE": "replica", "STATE": "streaming", "LAG": "16 MB", "LAG TIME": "2.5s", "PAUSED": "yes", "SYNC": "async", "CONFLICTS": "3", "READS": "yes"},
		{"NODE": "10.0.0.3:5432", "ZONE": "-", "LAG": "328 B", "LAG TIME": "512ms", "PAUSED": "no", "CONFLICTS": "?"},
		{"NODE": "10.0.0.4:5432", "ROLE": "unknown", "STATE": "unreachable", "TL": "-", "LSN": "-", "CONFLICTS": "-", "READS": "no", "WHY": "unreachable: dial tcp: connection refused"},
	}
	for i, w := range want {
		for k, v := range w {
			if rows[i][k] != v {
				t.Errorf("row %d column %s = %q, want %q", i, k, rows[i][k], v)
			}
		}
	}
	if !strings.Contains(out, "conflicts of 10.0.0.3:5432: reading pg_stat_database_conflicts: permission denied") {
		t.Error("the conflict counter error is not shown")
	}
}

func TestStatusJSON(t *testing.T) {
	var b bytes.Buffer
	if err := writeReport(&b, sampleReport(), true); err != nil {
		t.Fatal(err)
	}
	var nodes []map[string]any
	if err := json.Unmarshal(b.Bytes(), &nodes); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, b.String())
	}
	if len(nodes) != 4 {
		t.Fatalf("%d nodes, want 4", len(nodes))
	}
	p, r, down := nodes[0], nodes[1], nodes[3]
	checks := []struct {
		got, want any
		what      string
	}{
		{p["role"], "primary", "primary role"},
		{p["lsn"], "0/3000148", "LSN as a string"},
		{p["lag_bytes"], nil, "primary lag_bytes null"},
		{p["rtt_ms"], 0.8, "rtt in ms"},
		{r["replay_paused"], true, "replay_paused"},
		{r["lag_bytes"], float64(16777544), "lag_bytes"},
		{r["lag_ms"], 2500.0, "lag in ms"},
		{r["conflicts"], float64(3), "conflicts"},
		{r["reads"], true, "reads"},
		{nodes[2]["conflicts"], nil, "conflicts null on error"},
		{down["state"], "unreachable", "unreachable state"},
		{down["reads"], false, "no reads on an unreachable host"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v (%T), want %v", c.what, c.got, c.got, c.want)
		}
	}
	if s, _ := down["error"].(string); !strings.Contains(s, "connection refused") {
		t.Errorf("unreachable host's error = %q", s)
	}
}

func TestStatusReachability(t *testing.T) {
	rep := sampleReport()
	if !rep.reachable() || reachableExit(rep) != exitOK {
		t.Error("a cluster with a primary is unreachable")
	}
	rep.Nodes = rep.Nodes[3:]
	if rep.reachable() || reachableExit(rep) != exitFail {
		t.Error("a cluster of one unreachable host is reachable")
	}
}

func TestWatchFrameRedrawsInPlace(t *testing.T) {
	var b bytes.Buffer
	if err := writeFrame(&b, sampleReport(), time.Second, true); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.HasPrefix(out, ansiClearScreen+ansiHome) || !strings.HasSuffix(out, ansiClearBelow) {
		t.Errorf("first frame does not clear and home: %q", out[:min(len(out), 20)])
	}
	b.Reset()
	if err := writeFrame(&b, sampleReport(), time.Second, false); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, ansiClearScreen) || !strings.HasPrefix(out, ansiHome) {
		t.Error("later frames must redraw from home without clearing the screen")
	}
}

func TestSingleHostDSN(t *testing.T) {
	cfg, err := pgreplica.ParseDSN(`postgres://app:it's%5Cme@db1:5433,db2/shop?sslmode=disable&pgreplica_wait_budget=1s`)
	if err != nil {
		t.Fatal(err)
	}
	got := singleHostDSN(cfg, cfg.Hosts[1])
	want := `application_name='pgreplica-status' dbname='shop' host='db2' password='it\'s\\me' port='5432' sslmode='disable' user='app'`
	if got != want {
		t.Errorf("singleHostDSN\n got  %s\n want %s", got, want)
	}
	if _, err := pgconn.ParseConfig(got); err != nil {
		t.Errorf("pgx cannot parse it: %v", err)
	}
}
