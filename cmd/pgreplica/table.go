package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/pgreplica/pgreplica"
	"github.com/pgreplica/pgreplica/internal/clitext"
)

// renderStatus prints a status report: a summary line, one row per host,
// and the errors that have no column of their own.
func renderStatus(w io.Writer, rep report) error {
	var primary []string
	replicas, reading := 0, 0
	for _, n := range rep.Nodes {
		switch {
		case n.Error != "":
		case n.Role == "primary":
			primary = append(primary, n.Addr)
		case n.Role == "replica":
			replicas++
			if n.Reads {
				reading++
			}
		}
	}
	p := "no primary"
	if len(primary) > 0 {
		p = "primary " + strings.Join(primary, ", ")
	}
	fmt.Fprintf(w, "%d hosts at %s: %s; %d of %d reachable replicas take reads\n",
		rep.Hosts, rep.At.Format("15:04:05"), p, reading, replicas)
	switch {
	case errors.Is(rep.PingErr, pgreplica.ErrNoReachableHost):
		// Each row says why; the joined message would repeat them all.
		fmt.Fprintln(w, "writes: no host is reachable")
	case errors.Is(rep.PingErr, pgreplica.ErrInsufficientPrivilege):
		// Not about writes: the role cannot serve the configuration.
		fmt.Fprintln(w, rep.PingErr)
	case rep.PingErr != nil:
		fmt.Fprintf(w, "writes: %v\n", rep.PingErr)
	}
	fmt.Fprintln(w)

	t := clitext.Table{
		Header: []string{"NODE", "ZONE", "ROLE", "STATE", "TL", "LSN", "LAG", "LAG TIME", "PAUSED", "SYNC", "CONFLICTS", "READS", "WHY"},
		Right:  []bool{4: true, 6: true, 7: true, 10: true},
	}
	var notes []string
	for _, n := range rep.Nodes {
		tl, lag, lagTime, paused := "-", "-", "-", "-"
		if n.Timeline != 0 {
			tl = strconv.FormatUint(uint64(n.Timeline), 10)
		}
		if n.LagBytes != nil {
			lag = clitext.HumanBytes(*n.LagBytes)
		}
		if n.LagMs != nil {
			lagTime = clitext.HumanDuration(time.Duration(*n.LagMs * float64(time.Millisecond)))
		}
		if n.Role == "replica" {
			paused = yesNo(n.ReplayPaused)
		}
		conflicts := "-"
		switch {
		case n.Conflicts != nil:
			conflicts = strconv.FormatInt(*n.Conflicts, 10)
		case n.ConflictsError != "":
			conflicts = "?"
			notes = append(notes, fmt.Sprintf("conflicts of %s: %s", n.Addr, n.ConflictsError))
		}
		why := n.Why
		switch {
		case n.Endpoint:
			why = fmt.Sprintf("endpoint of %d servers (below); %s", len(n.Servers), why)
		case n.Pooler:
			why = "behind a pooler; " + why
		}
		t.Add(n.Addr, dash(n.Zone), n.Role, n.State, tl, dash(n.LSN), lag, lagTime, paused,
			dash(n.SyncState), conflicts, yesNo(n.Reads), why)
		for _, s := range n.Servers {
			t.Add("  "+s.Addr, "", "server", "", "", dash(s.LSN), "", "", "", "", "", "",
				"behind "+n.Addr+", up since "+s.StartedAt.Format("15:04:05"))
		}
	}
	if err := t.Write(w); err != nil {
		return err
	}
	for _, s := range notes {
		if _, err := fmt.Fprintln(w, s); err != nil {
			return err
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
