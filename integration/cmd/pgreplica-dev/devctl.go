package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// devState is what a running pgreplica-dev writes to its state file so
// that "pgreplica-dev lag|pause|resume|status" in another terminal finds
// it: the loopback address of its control server and the token that
// server wants. The file is readable by its owner only.
type devState struct {
	PID     int    `json:"pid"`
	DSN     string `json:"dsn"`
	Dir     string `json:"dir,omitempty"` // the cluster's directory
	Control string `json:"control"`       // host:port of the control server
	Token   string `json:"token"`
}

// devStateName is the state file's name inside -dir or the per-user
// runtime directory.
const devStateName = "pgreplica-dev.json"

// devStatePath returns where the state file of a dev cluster lives: in
// its -dir when one is given, else in $XDG_RUNTIME_DIR/pgreplica, else in
// the user's cache directory (os.UserCacheDir)/pgreplica.
func devStatePath(dir string) (string, error) {
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", fmt.Errorf("pgreplica-dev: %w", err)
		}
		return filepath.Join(abs, devStateName), nil
	}
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		var err error
		if base, err = os.UserCacheDir(); err != nil {
			return "", fmt.Errorf("pgreplica-dev: no place for the state file (give -dir): %w", err)
		}
	}
	return filepath.Join(base, "pgreplica", devStateName), nil
}

func readDevState(path string) (devState, error) {
	var st devState
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("pgreplica-dev: %s: %w", path, err)
	}
	return st, nil
}

// writeDevState writes the state file atomically, readable by its owner
// only (the token in it controls the cluster).
func writeDevState(path string, st devState) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("pgreplica-dev: %w", err)
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("pgreplica-dev: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("pgreplica-dev: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("pgreplica-dev: %w", err)
	}
	return nil
}

// errNoDev says that no dev cluster answers at a state file.
var errNoDev = errors.New("no pgreplica dev is running")

// findDev reads the state file at path and checks that its dev process
// answers. A state file whose process does not answer is stale: findDev
// returns errNoDev then (and for a missing file).
func findDev(ctx context.Context, path string) (devState, error) {
	st, err := readDevState(path)
	if errors.Is(err, fs.ErrNotExist) {
		return st, fmt.Errorf("%w (no %s)", errNoDev, path)
	}
	if err != nil {
		return st, err
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := devRequest(cctx, st, "ping", nil); err != nil {
		return st, fmt.Errorf("%w (%s names pid %d, which does not answer: %v)", errNoDev, path, st.PID, err)
	}
	return st, nil
}

// devRequest sends a control verb with its arguments to a running dev
// process and returns the text it answered.
func devRequest(ctx context.Context, st devState, verb string, args []string) (string, error) {
	q := url.Values{"arg": args}
	u := "http://" + st.Control + "/" + url.PathEscape(verb) + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return "", fmt.Errorf("pgreplica-dev: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+st.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("pgreplica-dev: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("pgreplica-dev: %w", err)
	}
	text := strings.TrimSpace(string(body))
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(text)
	}
	return text, nil
}

// controlServer serves the control verbs of a dev process on a loopback
// port to whoever presents the token.
type controlServer struct {
	srv   *http.Server
	ln    net.Listener
	token string
	done  chan struct{}
}

// startControl listens on 127.0.0.1 and serves do, which runs one verb.
func startControl(do func(ctx context.Context, verb string, args []string) (string, error)) (*controlServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("pgreplica-dev: control server: %w", err)
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	cs := &controlServer{ln: ln, token: hex.EncodeToString(tok), done: make(chan struct{})}
	cs.srv = &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+cs.token {
				http.Error(w, "pgreplica-dev: not authorised", http.StatusForbidden)
				return
			}
			verb := strings.TrimPrefix(r.URL.Path, "/")
			if verb == "ping" {
				fmt.Fprintln(w, "pong")
				return
			}
			out, err := do(r.Context(), verb, r.URL.Query()["arg"])
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintln(w, out)
		}),
	}
	go func() {
		defer close(cs.done)
		_ = cs.srv.Serve(ln)
	}()
	return cs, nil
}

func (cs *controlServer) addr() string { return cs.ln.Addr().String() }

// close stops the server, waiting for requests in flight.
func (cs *controlServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = cs.srv.Shutdown(ctx)
	<-cs.done
}
