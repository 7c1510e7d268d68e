package prober

import (
	"sync"
	"time"
)

// The registry of probers is package state, as the process's write
// positions are (internal/marks), and for the same reason: what a prober
// watches is the process's, not a handle's.
var process = registry{probers: map[Key]*Prober{}}

// Key is what makes two nodes' probes the same: the inner driver, the
// connection string it opens (credentials included: two roles may see
// different things), and the settings of the probe itself. How often to
// probe is not in it: a shared prober probes as often as its busiest
// subscriber asks.
type Key struct {
	Driver any // the handle's inner driver (pgreplica.InnerDriver)
	DSN    string
	Pin    string // the address it dials: "" when the host as configured
	// ConnectTimeout bounds connecting, Timeout a probe or capture.
	ConnectTimeout, Timeout time.Duration
	// Pgx is what else the connections are made from (PgxHooks).
	Pgx any
}

type registry struct {
	mu      sync.Mutex
	probers map[Key]*Prober
}

// Acquire returns the process's running prober for key, starting one
// with cfg when there is none; Release it when done.
func Acquire(key Key, cfg Config) *Prober {
	return process.acquire(key, cfg)
}

func (r *registry) acquire(key Key, cfg Config) *Prober {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.probers[key]; p != nil {
		p.refs++
		return p
	}
	p := New(key, cfg)
	p.refs, p.registry = 1, r
	r.probers[key] = p
	p.Start()
	return p
}

// Release lets go of p: the last holder of a shared prober, or the one
// of a prober of its own (New), stops it and closes its connection
// before Release returns.
func (p *Prober) Release() {
	if p.registry == nil {
		p.stop()
		return
	}
	p.registry.release(p)
}

func (r *registry) release(p *Prober) {
	r.mu.Lock()
	p.refs--
	last := p.refs == 0
	if last {
		delete(r.probers, p.key)
	}
	r.mu.Unlock()
	if last {
		p.stop()
	}
}
