//go:build !unix

package bench

import "time"

// processCPU is unknown here; the benchmarks then omit cpu-ns/op.
func processCPU() time.Duration { return -1 }
