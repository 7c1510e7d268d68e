//go:build linux

package integration

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// userHZ is the unit of the times in /proc/<pid>/stat: Linux reports them
// in clock ticks of 1/100 s on every architecture (USER_HZ).
const userHZ = 100

// ServerCPU returns the CPU time a PostgreSQL server has used so far, all
// of its processes together: the postmaster pm (Cluster.PID), every live
// process whose parent it is (backends, WAL senders, WAL writer,
// checkpointer, autovacuum, …) and, through pm's cutime and cstime, the children that
// have exited and been reaped. A benchmark takes the difference over a
// run, so what the server spends on the benchmark's statements, their WAL
// and its shipping to the replicas shows up wherever it is spent.
//
// A live process counts its exact on-CPU time from /proc/<pid>/schedstat
// (nanoseconds; user + system) rather than its utime + stime, which come in
// 10 ms ticks and would blur a block of a few thousand writes. pm is read
// before its children, so a child that exits meanwhile can be missed but
// never counted twice.
func ServerCPU(pm int) (time.Duration, error) {
	root, err := readProcTimes(pm)
	if err != nil {
		return 0, err
	}
	total := root.own + root.reaped
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == pm {
			continue
		}
		p, err := readProcTimes(pid)
		if err != nil || p.parent != pm {
			continue // gone meanwhile, or not the server's
		}
		total += p.own + p.reaped
	}
	return total, nil
}

// procTimes is what /proc says of one process's CPU time.
type procTimes struct {
	parent int
	own    time.Duration // the process itself
	reaped time.Duration // its children that exited and were waited for
}

// readProcTimes reads /proc/<pid>/stat and, for the process's own time,
// /proc/<pid>/schedstat when the kernel keeps it.
func readProcTimes(pid int) (procTimes, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procTimes{}, err
	}
	// The command name is in parentheses and may hold spaces: f[0] is
	// the state, field 3 in proc(5), so field k is f[k-3].
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procTimes{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 17-2 {
		return procTimes{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	field := func(k int) int64 {
		n, e := strconv.ParseInt(string(f[k-3]), 10, 64)
		if e != nil && err == nil {
			err = fmt.Errorf("/proc/%d/stat field %d: %w", pid, k, e)
		}
		return n
	}
	tick := func(k int) time.Duration { return time.Duration(field(k)) * time.Second / userHZ }
	p := procTimes{
		parent: int(field(4)),
		own:    tick(14) + tick(15), // utime + stime
		reaped: tick(16) + tick(17), // cutime + cstime
	}
	if err != nil {
		return procTimes{}, err
	}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat"); err == nil {
		if ns := bytes.Fields(b); len(ns) > 0 {
			if n, err := strconv.ParseInt(string(ns[0]), 10, 64); err == nil {
				p.own = time.Duration(n)
			}
		}
	}
	return p, nil
}
