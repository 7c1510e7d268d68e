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

func TestHelpAndUnknownCommand(t *testing.T) {
	ctx := testCtx(t, 10*time.Second)
	for _, c := range []struct {
		args []string
		code int
		out  string // in stdout
		err  string // in stderr
	}{
		{[]string{"help"}, exitOK, "pgreplica status [flags] DSN", ""},
		{[]string{"help", "status"}, exitOK, "", "-watch"},
		{[]string{"demo"}, exitUsage, "", "go run ./integration/cmd/pgreplica-demo"},
		{[]string{"help", "demo"}, exitUsage, "", "go run ./integration/cmd/pgreplica-demo"},
		{[]string{"dev"}, exitUsage, "", "go run ./integration/cmd/pgreplica-dev"},
		{[]string{"help", "dev"}, exitUsage, "", "integration/cmd/pgreplica-dev@latest"},
		{[]string{"version"}, exitOK, "(driver ", ""},
		{[]string{"version", "x"}, exitUsage, "", "no arguments expected"},
		{[]string{"help", "version"}, exitOK, "", "Usage: pgreplica version"},
		{nil, exitUsage, "", "Usage:"},
		{[]string{"frobnicate"}, exitUsage, "", `unknown command "frobnicate"`},
		{[]string{"status"}, exitUsage, "", "no DSN given"},
		{[]string{"status", "-nope", "x"}, exitUsage, "", "flag provided but not defined"},
		{[]string{"status", "postgres://h1/db?pgreplica_bogus=1"}, exitUsage, "", "unknown option"},
	} {
		var out, errOut bytes.Buffer
		t.Setenv(dsnEnv, "")
		code := run(ctx, c.args, &out, &errOut)
		if code != c.code || !strings.Contains(out.String(), c.out) || !strings.Contains(errOut.String(), c.err) {
			t.Errorf("run %q = %d, stdout %q, stderr %q; want %d, %q in stdout, %q in stderr",
				c.args, code, out.String(), errOut.String(), c.code, c.out, c.err)
		}
	}
}
