package pgreplica

import (
	"context"
	"errors"
	"testing"
)

func TestCheckSingleAddress(t *testing.T) {
	ctx := context.Background()
	fake := func(_ context.Context, host string) ([]string, error) {
		switch host {
		case "db1":
			return []string{"10.0.0.1"}, nil
		case "db-rr":
			return []string{"10.0.0.1", "10.0.0.2"}, nil
		}
		return nil, errors.New("no such host")
	}
	for _, addr := range []string{"127.0.0.1", "::1", "/var/run/postgresql", "db1"} {
		if err := checkSingleAddress(ctx, addr, fake); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	if err := checkSingleAddress(ctx, "db-rr", fake); !errors.Is(err, ErrAmbiguousHost) {
		t.Errorf("a name with two addresses: %v, want ErrAmbiguousHost", err)
	}
	if err := checkSingleAddress(ctx, "nope", fake); err == nil {
		t.Error("an unresolvable name must fail the probe")
	}
}
