//go:build linux

package patroni

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// restTimeout bounds one REST call: a frozen member's API accepts the
// connection and answers nothing.
const restTimeout = 700 * time.Millisecond

// ClusterState is Patroni's GET /cluster: the members as the
// configuration store knows them.
type ClusterState struct {
	Members []MemberState `json:"members"`
	// Raw is the response as Patroni sent it.
	Raw string `json:"-"`
	// From is the member whose API answered.
	From int `json:"-"`
}

// MemberState is one member in ClusterState.
type MemberState struct {
	Name string `json:"name"`
	// Role is "leader", "replica", "sync_standby" or "standby_leader".
	Role string `json:"role"`
	// State is "running", "starting", "stopping", "stopped", "crashed",
	// "creating replica", "restarting"…
	State    string          `json:"state"`
	APIURL   string          `json:"api_url"`
	Host     string          `json:"host"`
	Port     int             `json:"port"`
	Timeline int             `json:"timeline"`
	LagRaw   json.RawMessage `json:"lag"`
	Tags     map[string]any  `json:"tags"`
}

// Lag is a replica's lag in bytes, and false when Patroni does not know it
// ("unknown") or the member is the leader.
func (m MemberState) Lag() (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(string(m.LagRaw)), 10, 64)
	return n, err == nil
}

// Leader returns the member with the leader role, and false if none.
func (s *ClusterState) Leader() (MemberState, bool) {
	for _, m := range s.Members {
		if m.Role == "leader" {
			return m, true
		}
	}
	return MemberState{}, false
}

// Member returns the member named name, and false if none.
func (s *ClusterState) Member(name string) (MemberState, bool) {
	for _, m := range s.Members {
		if m.Name == name {
			return m, true
		}
	}
	return MemberState{}, false
}

// String is one line per member.
func (s *ClusterState) String() string {
	if s == nil {
		return "no /cluster answer"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "/cluster (from m%d):", s.From)
	for _, m := range s.Members {
		fmt.Fprintf(&b, "\n  %s %s %s port %d timeline %d", m.Name, m.Role, m.State, m.Port, m.Timeline)
		if lag, ok := m.Lag(); ok {
			fmt.Fprintf(&b, " lag %d", lag)
		} else if len(m.LagRaw) > 0 {
			fmt.Fprintf(&b, " lag %s", m.LagRaw)
		}
	}
	return b.String()
}

// MemberStatus is Patroni's GET /patroni of one member: what it sees of
// its own PostgreSQL.
type MemberStatus struct {
	State    string `json:"state"`
	Role     string `json:"role"` // "master" or "replica" (Patroni 3.0)
	Timeline int    `json:"timeline"`
	// Replication lists the walsenders of a primary.
	Replication []struct {
		ApplicationName string `json:"application_name"`
		State           string `json:"state"`
		SyncState       string `json:"sync_state"`
	} `json:"replication"`
	PostmasterStartTime string `json:"postmaster_start_time"`
	Raw                 string `json:"-"`
}

// get fetches url, bounded by timeout and ctx.
func (c *Cluster) get(ctx context.Context, url string, timeout time.Duration) (string, int, error) {
	return c.call(ctx, http.MethodGet, url, nil, timeout)
}

func (c *Cluster) call(ctx context.Context, method, url string, body any, timeout time.Duration) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return "", 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return "", 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}

// Cluster asks the members' REST APIs for GET /cluster, in member order,
// skipping frozen ones, and returns the first answer.
func (c *Cluster) Cluster(ctx context.Context) (*ClusterState, error) {
	var errs []string
	for _, i := range c.Live() {
		if c.isFrozen(i) {
			continue
		}
		body, code, err := c.get(ctx, c.RESTAddr(i)+"/cluster", restTimeout)
		if err != nil || code != http.StatusOK {
			errs = append(errs, fmt.Sprintf("m%d: %d %v", i, code, err))
			continue
		}
		var st ClusterState
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			errs = append(errs, fmt.Sprintf("m%d: %v in %q", i, err, body))
			continue
		}
		st.Raw, st.From = body, i
		return &st, nil
	}
	return nil, fmt.Errorf("patroni: no member answered GET /cluster (%s)", strings.Join(errs, "; "))
}

// Status asks member i's REST API for GET /patroni.
func (c *Cluster) Status(ctx context.Context, i int) (*MemberStatus, error) {
	body, code, err := c.get(ctx, c.RESTAddr(i)+"/patroni", restTimeout)
	if err != nil {
		return nil, fmt.Errorf("patroni: GET /patroni of m%d: %w", i, err)
	}
	var st MemberStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return nil, fmt.Errorf("patroni: GET /patroni of m%d (%d): %v in %q", i, code, err, body)
	}
	st.Raw = body
	return &st, nil
}

// Check asks member i's REST API for a health check path, as HAProxy does
// ("/primary", "/replica", "/replica?lag=1MB"…), and returns the status
// code: 200 when the member passes.
func (c *Cluster) Check(ctx context.Context, i int, path string) (int, error) {
	_, code, err := c.get(ctx, c.RESTAddr(i)+path, restTimeout)
	return code, err
}

// Describe says what state the cluster is in, for failure messages: the
// harness's view of each member's processes and Patroni's GET /cluster.
func (c *Cluster) Describe(ctx context.Context) string {
	var b strings.Builder
	b.WriteString("patroni cluster " + c.scope + " in " + c.dir + ":")
	c.mu.Lock()
	members := append([]*member(nil), c.members...)
	c.mu.Unlock()
	for _, m := range members {
		fmt.Fprintf(&b, "\n  %s: postgres 127.0.0.1:%d, REST 127.0.0.1:%d, ", m.name, m.pgPort, m.restPort)
		switch {
		case m.removed:
			b.WriteString("removed")
		case m.patroni == nil || !m.patroni.running():
			b.WriteString("patroni not running")
		default:
			b.WriteString("patroni running")
		}
		if pm := postmasterPid(m.data); pm > 0 {
			fmt.Fprintf(&b, ", postmaster %d", pm)
		} else {
			b.WriteString(", no postmaster")
		}
		if c.isFrozen(m.index) {
			b.WriteString(", FROZEN")
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	st, err := c.Cluster(ctx)
	if err != nil {
		b.WriteString("\n" + err.Error())
	} else {
		b.WriteString("\n" + st.String() + "\n  raw: " + st.Raw)
	}
	return b.String()
}

// withState appends Describe and the end of each member's log to err.
func (c *Cluster) withState(err error) error {
	var b strings.Builder
	for _, i := range c.Live() {
		fmt.Fprintf(&b, "\n--- end of m%d's log ---\n%s", i, c.LogTail(i, 15))
	}
	if c.etcd != nil && !c.etcd.running() {
		b.WriteString("\n--- end of etcd's log ---\n" + logTail(c.etcd.logPath, 15))
	}
	return fmt.Errorf("%w\n%s%s", err, c.Describe(context.Background()), b.String())
}

// pollEvery is how often waits look at their condition again.
const pollEvery = 50 * time.Millisecond

// poll calls cond until it holds or ctx ends; the error quotes cond's last
// explanation.
func (c *Cluster) poll(ctx context.Context, what string, cond func(ctx context.Context) (bool, string)) error {
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	var last string
	for {
		ok, why := cond(ctx)
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("patroni: waiting for %s: %w (last: %s)", what, context.Cause(ctx), last)
		case <-t.C:
		}
	}
}
