//go:build linux

package patroni

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"syscall"
	"time"
)

// AddMember starts one more member, which clones the leader
// (pg_basebackup) and streams from it, adds it to HAProxy's backends, and
// returns its index once it streams (WaitHealthy with every live member
// but the leader).
func (c *Cluster) AddMember(ctx context.Context) (int, error) {
	m, err := c.startMember()
	if err != nil {
		return -1, err
	}
	if _, err := c.WaitHealthy(ctx, len(c.Live())-1); err != nil {
		return m.index, err
	}
	return m.index, c.reloadHAProxy(ctx)
}

// RemoveMember takes member i out of the cluster for good: its Patroni
// daemon stops (SIGTERM: Patroni shuts PostgreSQL down and deletes its
// member key), HAProxy forgets it, and its directory goes. It refuses the
// leader: switch over first. It returns once GET /cluster no longer lists
// the member.
func (c *Cluster) RemoveMember(ctx context.Context, i int) error {
	m := c.member(i)
	if l, err := c.Leader(ctx); err == nil && l == i {
		return fmt.Errorf("patroni: m%d is the leader; switch over before removing it", i)
	}
	if err := c.Thaw(i); err != nil {
		return err
	}
	c.mu.Lock()
	m.removed = true // first: a Patroni daemon that stops is no failure now
	c.mu.Unlock()
	if m.patroni != nil {
		m.patroni.stop(syscall.SIGTERM, 30*time.Second)
	}
	if pm := postmasterPid(m.data); pm > 0 {
		_ = signalPid(pm, syscall.SIGQUIT)
	}
	// A member that stops keeps its key in the store until its TTL runs
	// out; delete it, as an operator removing the member would.
	if err := c.deleteMemberKey(ctx, m.name); err != nil {
		return err
	}
	err := c.poll(ctx, fmt.Sprintf("m%d to leave /cluster", i), func(ctx context.Context) (bool, string) {
		if len(procsIn(m.data, false)) > 0 {
			return false, "its PostgreSQL still runs"
		}
		st, err := c.Cluster(ctx)
		if err != nil {
			return false, err.Error()
		}
		if _, ok := st.Member(m.name); ok {
			return false, st.String()
		}
		return true, ""
	})
	if err != nil {
		return err
	}
	if err := os.RemoveAll(m.dir); err != nil {
		return fmt.Errorf("patroni: %w", err)
	}
	return c.reloadHAProxy(ctx)
}

// deleteMemberKey deletes member name's key from etcd, through the API
// Patroni uses.
func (c *Cluster) deleteMemberKey(ctx context.Context, name string) error {
	key := "/pgreplica/" + c.scope + "/members/" + name
	base := fmt.Sprintf("http://127.0.0.1:%d", c.etcdPort)
	var (
		body string
		code int
		err  error
	)
	if c.opts.DCS == "etcd3" {
		body, code, err = c.call(ctx, http.MethodPost, base+"/v3/kv/deleterange",
			map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key))}, restTimeout)
	} else {
		body, code, err = c.call(ctx, http.MethodDelete, base+"/v2/keys"+key, nil, restTimeout)
		if code == http.StatusNotFound {
			code = http.StatusOK // gone already
		}
	}
	if err != nil {
		return fmt.Errorf("patroni: deleting %s from etcd: %w", key, err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("patroni: deleting %s from etcd: %d %s", key, code, body)
	}
	return nil
}
