package pgreplica

import (
	"encoding"
	"errors"
	"flag"
	"fmt"
	"github.com/pgreplica/pgreplica/internal/tuning"
	"reflect"
	"strings"
	"testing"
	"time"
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
		{FallbackError, "error", new(Fallback)},
		{PolicyLeastLag, "least_lag", new(Policy)},
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

func TestWithDefaults(t *testing.T) {
	full := func(mod func(*Config)) Config {
		c := Config{
			Hosts:           []Host{dsnHost("h1", 5432), dsnHost("h2", 5433)},
			Driver:          DriverPgx,
			MaxConnsPerHost: 10,
			ConnMaxIdleTime: 5 * time.Minute,
			ConnMaxLifetime: time.Hour,
			ConnectTimeout:  5 * time.Second,
			WaitBudget:      150 * time.Millisecond,
			Fallback:        FallbackPrimary,
			knobs: tuning.Knobs{
				HealthCheckAfter:    time.Second,
				MonitorInterval:     250 * time.Millisecond,
				IdleMonitorInterval: time.Second,
				ProbeTimeout:        time.Second,
				HedgeDelay:          50 * time.Millisecond,
				MaxHedgePercent:     5,
			},
		}
		if mod != nil {
			mod(&c)
		}
		return c
	}
	tests := []struct {
		name string
		in   Config
		want Config
	}{
		{"zero config", Config{Hosts: []Host{{Addr: "h1"}, dsnHost("h2", 5433)}}, full(nil)},
		{"explicit values kept", full(func(c *Config) {
			c.Driver, c.MaxConnsPerHost, c.WaitBudget, c.Fallback = DriverPq, 4, time.Second, FallbackError
			c.Consistency, c.Policy, c.knobs.HealthCheckAfter = ConsistencyPrimary, PolicyLatency, 3*time.Second
		}), full(func(c *Config) {
			c.Driver, c.MaxConnsPerHost, c.WaitBudget, c.Fallback = DriverPq, 4, time.Second, FallbackError
			c.Consistency, c.Policy, c.knobs.HealthCheckAfter = ConsistencyPrimary, PolicyLatency, 3*time.Second
		})},
		{"negative health check kept", Config{Hosts: []Host{dsnHost("h1", 5432), dsnHost("h2", 5433)}, knobs: tuning.Knobs{HealthCheckAfter: -1}},
			full(func(c *Config) { c.knobs.HealthCheckAfter = -1 })},
		{"zones and params kept", Config{Hosts: []Host{dsnHostZ("h1", 0, "a"), dsnHostZ("h2", 5433, "b")}, Params: map[string]string{"sslmode": "disable"}, Zone: "a"},
			full(func(c *Config) {
				c.Hosts[0].Zone, c.Hosts[1].Zone, c.Zone = "a", "b", "a"
				c.Params = map[string]string{"sslmode": "disable"}
			})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.withDefaults()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("withDefaults\n got  %+v\n want %+v", got, tc.want)
			}
			if err := got.validate(); err != nil {
				t.Errorf("validate after withDefaults: %v", err)
			}
			if again := got.withDefaults(); !reflect.DeepEqual(again, got) {
				t.Errorf("withDefaults is not idempotent: %+v", again)
			}
		})
	}
}

func TestWithDefaultsCopies(t *testing.T) {
	in := Config{Hosts: []Host{{Addr: "h1"}}, Params: map[string]string{"a": "1"}}
	out := in.withDefaults()
	out.Hosts[0].Addr, out.Params["a"] = "x", "2"
	if in.Hosts[0].Addr != "h1" || in.Hosts[0].Port != 0 || in.Params["a"] != "1" {
		t.Errorf("withDefaults shares memory with its receiver: %+v", in)
	}
}

func TestValidate(t *testing.T) {
	ok := func(mod func(*Config)) Config {
		c := Config{Hosts: []Host{dsnHost("h1", 5432), {Addr: "h2"}}}
		mod(&c)
		return c
	}
	tests := []struct {
		name   string
		c      Config
		err    error // nil: valid
		errHas string
	}{
		{"minimal", ok(func(*Config) {}), nil, ""},
		{"negative health check disables", ok(func(c *Config) { c.knobs.HealthCheckAfter = -time.Second }), nil, ""},
		{"every field set", ok(func(c *Config) {
			c.Driver, c.MaxConnsPerHost, c.ConnMaxIdleTime, c.ConnMaxLifetime = DriverPq, 3, time.Second, time.Minute
			c.ConnectTimeout, c.knobs.MonitorInterval, c.WaitBudget, c.MaxLag = 1, 1, 1, time.Second
			c.Consistency, c.Fallback, c.Policy = ConsistencyEventual, FallbackError, PolicyRandom
			c.Params = map[string]string{"sslmode": "require", "search_path": "a,b", "myapp.x": ""}
		}), nil, ""},
		{"same addr other port", ok(func(c *Config) { c.Hosts = append(c.Hosts, dsnHost("h1", 5433)) }), nil, ""},
		{"no hosts", Config{}, ErrBadConfig, "no hosts"},
		{"empty addr", ok(func(c *Config) { c.Hosts[1].Addr = "" }), ErrBadConfig, "Hosts[1].Addr is empty"},
		{"comma in addr", ok(func(c *Config) { c.Hosts[0].Addr = "a,b" }), ErrBadConfig, "comma"},
		{"duplicate host, default port", ok(func(c *Config) { c.Hosts[1].Addr = "h1" }), ErrBadConfig, "same server"},
		{"unknown driver", ok(func(c *Config) { c.Driver = "mysql" }), ErrUnknownOption, `"mysql"; valid drivers: pgx, pq`},
		{"negative pool", ok(func(c *Config) { c.MaxConnsPerHost = -1 }), ErrBadConfig, "MaxConnsPerHost"},
		{"negative idle time", ok(func(c *Config) { c.ConnMaxIdleTime = -1 }), ErrBadConfig, "ConnMaxIdleTime"},
		{"negative lifetime", ok(func(c *Config) { c.ConnMaxLifetime = -1 }), ErrBadConfig, "ConnMaxLifetime"},
		{"negative connect timeout", ok(func(c *Config) { c.ConnectTimeout = -1 }), ErrBadConfig, "ConnectTimeout"},
		{"negative wait budget", ok(func(c *Config) { c.WaitBudget = -time.Millisecond }), ErrBadConfig, "WaitBudget"},
		{"negative max lag", ok(func(c *Config) { c.MaxLag = -1 }), ErrBadConfig, "MaxLag"},
		{"consistency out of range", ok(func(c *Config) { c.Consistency = 3 }), ErrBadConfig, "Consistency"},
		{"consistency negative", ok(func(c *Config) { c.Consistency = -1 }), ErrBadConfig, "Consistency"},
		{"fallback out of range", ok(func(c *Config) { c.Fallback = FallbackError + 1 }), ErrBadConfig, "Fallback"},
		{"policy out of range", ok(func(c *Config) { c.Policy = 4 }), ErrBadConfig, "Policy"},
		{"nul in password", ok(func(c *Config) { c.Password = "s3cr3t\x00" }), ErrBadConfig, "Password contains a NUL"},
		{"nul in user", ok(func(c *Config) { c.User = "a\x00" }), ErrBadConfig, "User"},
		{"nul in database", ok(func(c *Config) { c.Database = "a\x00" }), ErrBadConfig, "Database"},
		{"param host", ok(func(c *Config) { c.Params = map[string]string{"host": "x"} }), ErrBadConfig, "Config.Hosts"},
		{"param password", ok(func(c *Config) { c.Params = map[string]string{"password": "s3cr3t"} }), ErrBadConfig, "Config.User and Config.Password"},
		{"param dbname", ok(func(c *Config) { c.Params = map[string]string{"dbname": "x"} }), ErrBadConfig, "Config.Database"},
		{"param hostaddr", ok(func(c *Config) { c.Params = map[string]string{"hostaddr": "::1"} }), ErrBadConfig, "hostaddr"},
		{"param target_session_attrs", ok(func(c *Config) { c.Params = map[string]string{"target_session_attrs": "any"} }), ErrBadConfig, "discovers roles"},
		{"param pgreplica option", ok(func(c *Config) { c.Params = map[string]string{"pgreplica_driver": "pq"} }), ErrBadConfig, "Config field"},
		{"param bad key", ok(func(c *Config) { c.Params = map[string]string{"a b": "x"} }), ErrBadConfig, `"a b"`},
		{"param empty key", ok(func(c *Config) { c.Params = map[string]string{"": "x"} }), ErrBadConfig, "Params key"},
		{"param nul value", ok(func(c *Config) { c.Params = map[string]string{"sslpassword": "s3cr3t\x00"} }), ErrBadConfig, "NUL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.validate()
			if tc.err == nil {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				if err := tc.c.withDefaults().validate(); err != nil {
					t.Fatalf("validate after withDefaults: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("validate = %v, want an error wrapping %v", err, tc.err)
			}
			if !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("error %q does not contain %q", err, tc.errHas)
			}
			if strings.Contains(err.Error(), dsnTestPassword) {
				t.Errorf("error leaks the password: %v", err)
			}
			// Defaults never repair an invalid config.
			if err := tc.c.withDefaults().validate(); !errors.Is(err, tc.err) {
				t.Errorf("after withDefaults validate = %v, want %v", err, tc.err)
			}
		})
	}
}
