package statustest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // "pgx", for keepWriting
	"github.com/pgreplica/pgreplica/integration"
)

// cluster is one primary and two replicas shared by the package's
// integration tests; nil when no PostgreSQL is installed (they skip).
var cluster *integration.Cluster

// pgreplicaBin is the pgreplica command, built by TestMain.
var pgreplicaBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pgreplica-statustest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	pgreplicaBin = filepath.Join(dir, "pgreplica")
	// go test puts its own go first on PATH.
	build := exec.Command("go", "build", "-o", pgreplicaBin, "github.com/pgreplica/pgreplica/cmd/pgreplica")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "statustest: building the pgreplica command:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := integration.Main(m, integration.Options{Replicas: 2}, &cluster)
	os.RemoveAll(dir)
	os.Exit(code)
}

// The command's exit code for success.
const exitOK = 0

// ANSI sequences the command writes with -watch to redraw in place.
const (
	ansiHome        = "\x1b[H"
	ansiClearScreen = "\x1b[2J"
)

// run runs the pgreplica command with args (args[0] is the subcommand)
// and returns its exit code, -1 when it did not start or died of a signal.
// When ctx ends the command gets an interrupt, as from Ctrl-C.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := exec.CommandContext(ctx, pgreplicaBin, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(os.Environ(), "PGREPLICA_DSN=")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second // then it is killed
	if err := cmd.Run(); cmd.ProcessState == nil {
		fmt.Fprintln(stderr, "statustest:", err)
		return -1
	}
	return cmd.ProcessState.ExitCode()
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// nodeReport is one host's object in the output of status -json: the
// fields these tests read.
type nodeReport struct {
	Addr         string   `json:"addr"`
	Role         string   `json:"role"`
	State        string   `json:"state"`
	Error        string   `json:"error,omitempty"`
	Timeline     uint32   `json:"timeline"`
	LSN          string   `json:"lsn"`
	LagBytes     *uint64  `json:"lag_bytes"`
	LagMs        *float64 `json:"lag_ms"`
	ReplayPaused bool     `json:"replay_paused"`
	SyncState    string   `json:"sync_state"`
	Conflicts    *int64   `json:"conflicts"`
	Reads        bool     `json:"reads"`
	Endpoint     bool     `json:"endpoint"`
	Servers      []struct {
		Addr string `json:"addr"`
	} `json:"servers"`
}

// columns splits a rendered status table into cells keyed by header.
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
