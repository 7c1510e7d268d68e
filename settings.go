package pgreplica

import "time"

// settings are the values of Config that every statement reads, copied
// together into one cache line when the connector is made (Config spreads
// them over five): what decide reads, and the hedge delay.
type settings struct {
	waitBudget, maxLag, hedgeDelay time.Duration
	maxLagBytes                    uint64
	zone                           string
	consistency                    Consistency
	fallback                       Fallback
}

func settingsOf(cfg *Config) settings {
	return settings{
		waitBudget: cfg.WaitBudget, maxLag: cfg.MaxLag, hedgeDelay: cfg.HedgeDelay,
		maxLagBytes: cfg.MaxLagBytes, zone: cfg.Zone,
		consistency: cfg.DefaultConsistency, fallback: cfg.Fallback,
	}
}
