//go:build !linux

package integration

import (
	"errors"
	"time"
)

// ServerCPU needs Linux's /proc; elsewhere the benchmarks omit the
// server's CPU figures.
func ServerCPU(int) (time.Duration, error) {
	return 0, errors.New("the server's CPU time is read from /proc, which only Linux has")
}
