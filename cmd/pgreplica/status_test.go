package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// unreachableHost refuses connections at once: nothing listens on port 1.
const unreachableHost = "127.0.0.1:1"

// TestStatusNoReachableHost needs no cluster: a DSN of hosts nobody
// listens on prints their errors and exits 1.
func TestStatusNoReachableHost(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(testCtx(t, 30*time.Second), []string{"status", "-sample", "0s",
		"postgres://u@" + unreachableHost + ",127.0.0.1:2/db?sslmode=disable"}, &out, &errOut)
	if code != exitFail {
		t.Errorf("exit code %d, want %d", code, exitFail)
	}
	if got := strings.Count(out.String(), "unreachable"); got < 2 || !strings.Contains(out.String(), "no host is reachable") {
		t.Errorf("output does not show both hosts unreachable:\n%s%s", out.String(), errOut.String())
	}
}
