package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestCommandLine: the command lines refused before any server starts.
func TestCommandLine(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	for _, c := range []struct {
		args []string
		code int
		err  string // in stderr
	}{
		{[]string{"-h"}, exitOK, "-replicas"},
		{[]string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{[]string{"lag", "1"}, exitUsage, "want lag N DURATION"},
		{[]string{"-replicas", "0"}, exitUsage, "-replicas must be 1 to 9"},
		{[]string{"-nope"}, exitUsage, "flag provided but not defined"},
	} {
		var out, errOut bytes.Buffer
		code := run(ctx, c.args, nil, &out, &errOut)
		if code != c.code || !strings.Contains(errOut.String(), c.err) {
			t.Errorf("run %q = %d, stdout %q, stderr %q; want %d, %q in stderr",
				c.args, code, out.String(), errOut.String(), c.code, c.err)
		}
	}
}
