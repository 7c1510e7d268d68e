//go:build !linux

package bench

import (
	"errors"
	"time"
)

// serverCPU needs Linux's /proc; elsewhere the benchmarks omit the
// server's CPU figures.
func serverCPU(int) (time.Duration, error) {
	return 0, errors.New("the server's CPU time is read from /proc, which only Linux has")
}
