package pgreplica

import (
	"context"
	"sync"
	"time"
)

// monitor polls every node on one goroutine per connector, publishes a new
// topology after each round, and keeps the pools trimmed.
type monitor struct {
	c     *Connector
	wake  chan struct{}
	ready chan struct{} // closed after the first round
	round chan struct{} // closed and replaced after every round
	mu    sync.Mutex
}

func newMonitor(c *Connector) *monitor {
	return &monitor{c: c, wake: make(chan struct{}, 1), ready: make(chan struct{}), round: make(chan struct{})}
}

// poke asks for an early round without blocking.
func (m *monitor) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// nextRound returns a channel closed when the round after now completes.
func (m *monitor) nextRound() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.round
}

func (m *monitor) run(ctx context.Context) {
	t := time.NewTicker(m.c.cfg.MonitorInterval)
	defer t.Stop()
	first := true
	for {
		m.runRound(ctx)
		if first {
			close(m.ready)
			first = false
		}
		select {
		case <-ctx.Done():
			for _, n := range m.c.nodes {
				if n.probeConn != nil {
					n.probeConn.Close()
					n.probeConn = nil
				}
			}
			return
		case <-t.C:
		case <-m.wake:
		}
	}
}

func (m *monitor) runRound(ctx context.Context) {
	var wg sync.WaitGroup
	for _, n := range m.c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, m.c.cfg.ConnectTimeout)
			st := m.c.probe(pctx, n)
			cancel()
			if ctx.Err() != nil {
				return
			}
			m.c.applyStatus(n, st)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	t := buildTopology(m.c.nodes, m.c.cfg.ExcludeSyncStandby)
	m.c.measureLag(t)
	m.c.publish(t)
	for _, n := range m.c.nodes {
		if n.pool != nil {
			n.pool.reap()
		}
	}
	m.mu.Lock()
	close(m.round)
	m.round = make(chan struct{})
	m.mu.Unlock()
}
