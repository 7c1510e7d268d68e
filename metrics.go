package pgreplica

import (
	"sync/atomic"

	"github.com/pgreplica/pgreplica/internal/histogram"
)

// The connector's counters: atomics the hot path adds to. Stats
// (stats.go) is their snapshot.

// metrics are the connector's counters: atomics only, so recording costs
// no lock on the hot path.
type metrics struct {
	// What most reads count first (the connector keeps them in a cache
	// line with its logger).
	replicaReads, tokenedReads, primaryReads atomic.Int64
	// wait's first bucket counts the position reads that waited for
	// nothing: most of them.
	wait                               histogram.Latency
	fallbackReads                      atomic.Int64
	fallbackTimeout, fallbackNoReplica atomic.Int64
	failedTimeout, failedNoReplica     atomic.Int64
	tokenedFallbacks                   atomic.Int64
	lsnCaptures                        atomic.Int64
	conflictRetries, readOnlyRetries   atomic.Int64
	connLostRetries, fallbackRejected  atomic.Int64
	recentWriteReads                   atomic.Int64
	hedges, hedgeWins, hedgesDenied    atomic.Int64
	visibilityWaits                    atomic.Int64
	fallbackConflict, conflictsAvoided atomic.Int64
	fallbackPeak                       atomic.Int64
	replayChecks, flightChecks         atomic.Int64
}

// noteFallback counts a read that could not use a replica.
func (m *metrics) noteFallback(reason string, tokened, failed bool) {
	if tokened {
		m.tokenedFallbacks.Add(1)
	}
	switch {
	case failed && reason == ReasonTimeout:
		m.failedTimeout.Add(1)
	case failed:
		m.failedNoReplica.Add(1)
	case reason == ReasonTimeout:
		m.fallbackTimeout.Add(1)
	case reason == ReasonConflict:
		m.fallbackConflict.Add(1)
	default:
		m.fallbackNoReplica.Add(1)
	}
}
