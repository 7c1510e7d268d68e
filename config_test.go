package pgreplica

import (
	"encoding"
	"errors"
	"flag"
	"fmt"
	"testing"
)

func TestEnumsRoundTripThroughText(t *testing.T) {
	type textEnum interface {
		fmt.Stringer
		encoding.TextMarshaler
	}
	cases := []struct {
		v    textEnum
		want string
		into encoding.TextUnmarshaler
	}{
		{ConsistencyEventual, "eventual", new(Consistency)},
		{ConsistencyProcess, "process", new(Consistency)},
		{FallbackStale, "stale", new(Fallback)},
		{FallbackDefault, "default", new(Fallback)},
		{PolicyLeastLag, "least_lag", new(Policy)},
		{ReadAfterWriteReplica, "replica", new(ReadAfterWrite)},
	}
	for _, tc := range cases {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%T String() = %q, want %q", tc.v, got, tc.want)
		}
		b, err := tc.v.MarshalText()
		if err != nil || string(b) != tc.want {
			t.Errorf("%T MarshalText() = %q, %v", tc.v, b, err)
		}
		if err := tc.into.UnmarshalText(b); err != nil {
			t.Errorf("%T UnmarshalText(%q): %v", tc.into, b, err)
		}
		if got := fmt.Sprint(tc.into); got != tc.want {
			t.Errorf("%T parsed back as %q, want %q", tc.into, got, tc.want)
		}
	}
}

func TestEnumsRejectUnknownNames(t *testing.T) {
	var p Policy
	err := p.UnmarshalText([]byte("fastest"))
	if !errors.Is(err, ErrBadConfig) {
		t.Fatalf("err = %v, want ErrBadConfig", err)
	}
	if got := Policy(42).String(); got != "pgreplica.Policy(42)" {
		t.Fatalf("out of range: %q", got)
	}
	if _, err := Policy(42).MarshalText(); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("MarshalText out of range: %v", err)
	}
}

func ExamplePolicy_UnmarshalText() {
	fs := flag.NewFlagSet("app", flag.ContinueOnError)
	var policy Policy
	fs.TextVar(&policy, "replica-policy", PolicyRoundRobin, "how to choose a replica")
	_ = fs.Parse([]string{"-replica-policy", "least-lag"})
	fmt.Println(policy)
	// Output: least_lag
}
