package pgreplica

import (
	"errors"
	"github.com/pgreplica/pgreplica/internal/tuning"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lib/pq"

	"github.com/pgreplica/pgreplica/internal/dsnopt"
	"github.com/pgreplica/pgreplica/internal/libpqdsn"
)

// dsnTestPassword appears in many DSNs below; no error may ever contain it.
const dsnTestPassword = "s3cr3t"

func dsnHost(addr string, port uint16) Host { return Host{Addr: addr, Port: port} }

func dsnHostZ(addr string, port uint16, zone string) Host {
	return Host{Addr: addr, Port: port, Zone: zone}
}

type dsnCase struct {
	name string
	dsn  string
	// want is compared with the whole parsed Config when set.
	want *Config
	// check inspects the parsed Config when set.
	check func(t *testing.T, c Config)
	// err is the sentinel the error must wrap; nil means success.
	err error
	// errHas are substrings the error message must contain.
	errHas []string
}

// one returns a check of a single field, with the usual single host.
func dsnField[T any](get func(Config) T, want T) func(*testing.T, Config) {
	return func(t *testing.T, c Config) {
		t.Helper()
		if got := get(c); !reflect.DeepEqual(got, want) {
			t.Errorf("got %#v, want %#v", got, want)
		}
	}
}

var dsnCases = []dsnCase{
	// ---- URL form ----
	{name: "url single host", dsn: "postgres://app:pw@db1/shop",
		want: &Config{Hosts: []Host{dsnHost("db1", 5432)}, User: "app", Password: "pw", Database: "shop"}},
	{name: "url hosts and ports", dsn: "postgres://user:s3cr3t@h1:5432,h2:5433,h3/db?sslmode=disable&pgreplica_driver=pq",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432), dsnHost("h2", 5433), dsnHost("h3", 5432)}, User: "user", Password: dsnTestPassword,
			Database: "db", Params: map[string]string{"sslmode": "disable"}, Driver: DriverPq}},
	{name: "url postgresql scheme", dsn: "postgresql://h1/db",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, Database: "db"}},
	{name: "url scheme case", dsn: "PostgreSQL://h1:6000",
		want: &Config{Hosts: []Host{dsnHost("h1", 6000)}}},
	{name: "url percent decoding", dsn: "postgres://us%40er:p%2Fw%3Fd%25%20x@h1/my%20db?application_name=a%26b",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, User: "us@er", Password: "p/w?d% x", Database: "my db",
			Params: map[string]string{"application_name": "a&b"}}},
	{name: "url plus is not a space", dsn: "postgres://u:a+b@h1/db?application_name=x+y",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, User: "u", Password: "a+b", Database: "db",
			Params: map[string]string{"application_name": "x+y"}}},
	{name: "url unencoded at in password", dsn: "postgres://u:p@ss@h1/db",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, User: "u", Password: "p@ss", Database: "db"}},
	{name: "url ipv6", dsn: "postgres://[::1]:5433,[fe80::1%25eth0],[2001:db8::2]:6000/db",
		want: &Config{Hosts: []Host{dsnHost("::1", 5433), dsnHost("fe80::1%eth0", 5432), dsnHost("2001:db8::2", 6000)}, Database: "db"}},
	{name: "url unix socket in authority", dsn: "postgres://%2Fvar%2Frun%2Fpostgresql/db",
		want: &Config{Hosts: []Host{dsnHost("/var/run/postgresql", 5432)}, Database: "db"}},
	{name: "url unix socket as parameter", dsn: "postgres:///db?host=/var/run/postgresql&port=5433",
		want: &Config{Hosts: []Host{dsnHost("/var/run/postgresql", 5433)}, Database: "db"}},
	{name: "url host parameter list with authority port", dsn: "postgres://:6000/db?host=a,b",
		want: &Config{Hosts: []Host{dsnHost("a", 6000), dsnHost("b", 6000)}, Database: "db"}},
	{name: "url port parameter for all", dsn: "postgres://h1,h2/db?port=6000",
		want: &Config{Hosts: []Host{dsnHost("h1", 6000), dsnHost("h2", 6000)}, Database: "db"}},
	{name: "url own port beats port parameter", dsn: "postgres://h1:5433,h2/db?port=6000",
		want: &Config{Hosts: []Host{dsnHost("h1", 5433), dsnHost("h2", 6000)}, Database: "db"}},
	{name: "url port parameter list", dsn: "postgres://h1,h2,h3/db?port=6000,,6002",
		want: &Config{Hosts: []Host{dsnHost("h1", 6000), dsnHost("h2", 5432), dsnHost("h3", 6002)}, Database: "db"}},
	{name: "url query overrides authority", dsn: "postgres://u1:pw1@h1/db1?user=u2&password=s3cr3t&dbname=db2",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, User: "u2", Password: dsnTestPassword, Database: "db2"}},
	{name: "url database alias", dsn: "postgres://h1?database=shop",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, Database: "shop"}},
	{name: "url target_session_attrs dropped", dsn: "postgres://h1,h2/db?target_session_attrs=read-write&load_balance_hosts=random",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432), dsnHost("h2", 5432)}, Database: "db"}},
	{name: "url empty query segments", dsn: "postgres://h1/db?&sslmode=require&&",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, Database: "db", Params: map[string]string{"sslmode": "require"}}},
	{name: "url user without password", dsn: "postgres://app@h1/", want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, User: "app"}},
	{name: "url surrounding spaces", dsn: "  postgres://h1/db \n", want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, Database: "db"}},
	{name: "url last duplicate wins", dsn: "postgres://h1/db?sslmode=disable&sslmode=require",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, Database: "db", Params: map[string]string{"sslmode": "require"}}},

	// ---- keyword/value form ----
	{name: "kv brief example", dsn: "host=h1,h2,h3 port=5432,5433,5432 dbname=shop user=app password='it''s' sslmode=disable",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432), dsnHost("h2", 5433), dsnHost("h3", 5432)}, User: "app", Password: "it's",
			Database: "shop", Params: map[string]string{"sslmode": "disable"}}},
	{name: "kv one port for all hosts", dsn: "host=h1,h2 port=6000",
		want: &Config{Hosts: []Host{dsnHost("h1", 6000), dsnHost("h2", 6000)}}},
	{name: "kv no port", dsn: "host=h1", want: &Config{Hosts: []Host{dsnHost("h1", 5432)}}},
	{name: "kv empty port entry", dsn: "host=h1,h2 port=,5433",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432), dsnHost("h2", 5433)}}},
	{name: "kv quoted escapes", dsn: `host=h1 password='a\'b\\c d'`,
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, Password: `a'b\c d`}},
	{name: "kv unquoted escapes", dsn: `host=h1 password=a\ b\\c'd`,
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, Password: `a b\c'd`}},
	{name: "kv spaces around equals", dsn: "\thost = h1\n dbname =shop user= app ",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, User: "app", Database: "shop"}},
	{name: "kv empty values", dsn: "host=h1 user='' application_name=",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, Params: map[string]string{"application_name": ""}}},
	{name: "kv ipv6 and socket", dsn: "host=::1,/var/run/postgresql,fe80::1%eth0 port=5433",
		want: &Config{Hosts: []Host{dsnHost("::1", 5433), dsnHost("/var/run/postgresql", 5433), dsnHost("fe80::1%eth0", 5433)}}},
	{name: "kv quoted host list with spaces", dsn: "host='h1, h2' port=' 1, 2'",
		want: &Config{Hosts: []Host{dsnHost("h1", 1), dsnHost("h2", 2)}}},
	{name: "kv value then key without space", dsn: "host='h1'dbname=x",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, Database: "x"}},
	{name: "kv last duplicate wins", dsn: "host=h1 host=h2 dbname=a database=b",
		want: &Config{Hosts: []Host{dsnHost("h2", 5432)}, Database: "b"}},
	{name: "kv target_session_attrs dropped", dsn: "host=h1 target_session_attrs=any options='-c search_path=x'",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, Params: map[string]string{"options": "-c search_path=x"}}},
	{name: "kv runtime parameter with dot", dsn: "host=h1 myapp.tenant=7",
		want: &Config{Hosts: []Host{dsnHost("h1", 5432)}, Params: map[string]string{"myapp.tenant": "7"}}},
	{name: "kv every option", dsn: "host=a,b,c pgreplica_driver=pq pgreplica_max_conns_per_host=20 pgreplica_conn_max_idle_time=1m " +
		"pgreplica_conn_max_lifetime=2h pgreplica_connect_timeout=3s " +
		"pgreplica_consistency=eventual pgreplica_wait_budget=50ms pgreplica_fallback=error " +
		"pgreplica_policy=least_lag pgreplica_zone=eu-1a pgreplica_zones='eu-1a, eu-1b,' pgreplica_max_lag=2s",
		want: &Config{Hosts: []Host{dsnHostZ("a", 5432, "eu-1a"), dsnHostZ("b", 5432, "eu-1b"), dsnHostZ("c", 5432, "")},
			Driver: DriverPq, MaxConnsPerHost: 20, ConnMaxIdleTime: time.Minute, ConnMaxLifetime: 2 * time.Hour,
			ConnectTimeout: 3 * time.Second, Consistency: ConsistencyEventual, WaitBudget: 50 * time.Millisecond, Fallback: FallbackError,
			Policy: PolicyLeastLag, Zone: "eu-1a", MaxLag: 2 * time.Second}},

	// ---- every option, good values ----
	{name: "opt driver pgx", dsn: "host=h pgreplica_driver=pgx", check: dsnField(func(c Config) InnerDriver { return c.Driver }, DriverPgx)},
	{name: "opt driver pq upper-case name", dsn: "host=h PGREPLICA_DRIVER=PQ", check: dsnField(func(c Config) InnerDriver { return c.Driver }, DriverPq)},
	{name: "opt max_conns_per_host", dsn: "host=h pgreplica_max_conns_per_host=1", check: dsnField(func(c Config) int { return c.MaxConnsPerHost }, 1)},
	{name: "opt conn_max_idle_time", dsn: "host=h pgreplica_conn_max_idle_time=90s", check: dsnField(func(c Config) time.Duration { return c.ConnMaxIdleTime }, 90*time.Second)},
	{name: "opt conn_max_lifetime", dsn: "host=h pgreplica_conn_max_lifetime=1h30m", check: dsnField(func(c Config) time.Duration { return c.ConnMaxLifetime }, 90*time.Minute)},
	{name: "opt connect_timeout", dsn: "host=h pgreplica_connect_timeout=10s", check: dsnField(func(c Config) time.Duration { return c.ConnectTimeout }, 10*time.Second)},
	{name: "opt consistency process", dsn: "host=h pgreplica_consistency=eventual pgreplica_consistency=process", check: dsnField(func(c Config) Consistency { return c.Consistency }, ConsistencyProcess)},
	{name: "opt consistency primary", dsn: "host=h pgreplica_consistency=primary", check: dsnField(func(c Config) Consistency { return c.Consistency }, ConsistencyPrimary)},
	{name: "opt wait_budget", dsn: "postgres://h/db?pgreplica_wait_budget=150ms", check: dsnField(func(c Config) time.Duration { return c.WaitBudget }, 150*time.Millisecond)},
	{name: "opt fallback primary", dsn: "host=h pgreplica_fallback=primary", check: dsnField(func(c Config) Fallback { return c.Fallback }, FallbackPrimary)},
	{name: "opt policy round-robin", dsn: "host=h pgreplica_policy=Round-Robin", check: dsnField(func(c Config) Policy { return c.Policy }, PolicyRoundRobin)},
	{name: "opt policy random", dsn: "host=h pgreplica_policy=random", check: dsnField(func(c Config) Policy { return c.Policy }, PolicyRandom)},
	{name: "opt policy latency", dsn: "host=h pgreplica_policy=latency", check: dsnField(func(c Config) Policy { return c.Policy }, PolicyLatency)},
	{name: "opt zone with spaces", dsn: "host=h pgreplica_zone='us east'", check: dsnField(func(c Config) string { return c.Zone }, "us east")},
	{name: "opt zones url", dsn: "postgres://h1,h2/db?pgreplica_zones=z1,z2", check: dsnField(func(c Config) []Host { return c.Hosts }, []Host{dsnHostZ("h1", 5432, "z1"), dsnHostZ("h2", 5432, "z2")})},
	{name: "opt max_lag zero", dsn: "host=h pgreplica_max_lag=0", check: dsnField(func(c Config) time.Duration { return c.MaxLag }, 0)},

	// ---- every option, bad values ----
	{name: "bad driver", dsn: "host=h password=s3cr3t pgreplica_driver=mysql", err: ErrBadDSN, errHas: []string{"pgreplica_driver", `"mysql"`, "pgx, pq"}},
	{name: "bad max_conns_per_host zero", dsn: "host=h password=s3cr3t pgreplica_max_conns_per_host=0", err: ErrBadDSN, errHas: []string{"pgreplica_max_conns_per_host", `"0"`, "> 0"}},
	{name: "bad max_conns_per_host text", dsn: "host=h pgreplica_max_conns_per_host=ten", err: ErrBadDSN, errHas: []string{"pgreplica_max_conns_per_host", `"ten"`}},
	{name: "bad conn_max_idle_time no unit", dsn: "host=h password=s3cr3t pgreplica_conn_max_idle_time=5", err: ErrBadDSN, errHas: []string{"pgreplica_conn_max_idle_time", `"5"`, "150ms"}},
	{name: "bad conn_max_lifetime negative", dsn: "host=h pgreplica_conn_max_lifetime=-1h", err: ErrBadDSN, errHas: []string{"pgreplica_conn_max_lifetime", `"-1h"`}},
	{name: "bad connect_timeout zero", dsn: "host=h pgreplica_connect_timeout=0s", err: ErrBadDSN, errHas: []string{"pgreplica_connect_timeout", `"0s"`}},
	{name: "bad consistency", dsn: "host=h pgreplica_consistency=strong", err: ErrBadDSN, errHas: []string{"pgreplica_consistency", `"strong"`, "process, eventual, primary"}},
	{name: "removed default", dsn: "host=h pgreplica_default=eventual", err: ErrUnknownOption, errHas: []string{"pgreplica_default", "removed: renamed pgreplica_consistency"}},
	{name: "removed monitor_interval", dsn: "postgres://h/db?pgreplica_monitor_interval=1s", err: ErrUnknownOption, errHas: []string{"pgreplica_monitor_interval", "removed: "}},
	{name: "removed max_lag_bytes", dsn: "host=h pgreplica_max_lag_bytes=16MB", err: ErrUnknownOption, errHas: []string{"removed: use pgreplica_max_lag"}},
	{name: "bad wait_budget zero", dsn: "postgres://u:s3cr3t@h/db?pgreplica_wait_budget=0", err: ErrBadDSN, errHas: []string{"pgreplica_wait_budget", `"0"`}},
	{name: "bad fallback", dsn: "host=h pgreplica_fallback=replica", err: ErrBadDSN, errHas: []string{"pgreplica_fallback", "primary, error"}},
	{name: "bad policy", dsn: "host=h pgreplica_policy=fastest", err: ErrBadDSN, errHas: []string{"pgreplica_policy", "round_robin, random, least_lag, latency"}},
	{name: "bad zones count", dsn: "host=h1,h2 password=s3cr3t pgreplica_zones=z1", err: ErrBadDSN, errHas: []string{"pgreplica_zones", "1 zones for 2 hosts"}},
	{name: "bad max_lag negative", dsn: "host=h pgreplica_max_lag=-1s", err: ErrBadDSN, errHas: []string{"pgreplica_max_lag", `"-1s"`}},
	{name: "bad empty option value", dsn: "host=h pgreplica_driver=", err: ErrBadDSN, errHas: []string{"pgreplica_driver"}},

	// ---- unknown options ----
	{name: "unknown option typo", dsn: "host=h password=s3cr3t pgreplica_wait_bugdet=1s", err: ErrUnknownOption,
		errHas: []string{`"pgreplica_wait_bugdet"`, "did you mean pgreplica_wait_budget", "pgreplica_driver", "pgreplica_zones"}},
	{name: "unknown option url", dsn: "postgres://u:s3cr3t@h/db?pgreplica_sharding=on", err: ErrUnknownOption, errHas: []string{`"pgreplica_sharding"`, "valid pgreplica options"}},

	// ---- malformed input ----
	{name: "empty", dsn: "", err: ErrBadDSN, errHas: []string{"empty DSN", "PGHOST"}},
	{name: "blank", dsn: " \t\n", err: ErrBadDSN, errHas: []string{"empty DSN"}},
	{name: "url open bracket", dsn: "postgres://[", err: ErrBadDSN, errHas: []string{"']'"}},
	{name: "url open bracket with password", dsn: "postgres://u:s3cr3t@[::1/db", err: ErrBadDSN, errHas: []string{"']'"}},
	{name: "url text after bracket", dsn: "postgres://[::1]x/db", err: ErrBadDSN},
	{name: "url brackets not ipv6", dsn: "postgres://[db1]/db", err: ErrBadDSN, errHas: []string{"IPv6"}},
	{name: "url unbracketed ipv6", dsn: "postgres://::1:5432/db", err: ErrBadDSN, errHas: []string{"brackets"}},
	{name: "url empty host in list", dsn: "postgres://u:s3cr3t@h1,,h3/db", err: ErrBadDSN, errHas: []string{"entry 2 is empty"}},
	{name: "url port out of range", dsn: "postgres://h1:65536/db", err: ErrBadDSN, errHas: []string{`"65536"`, "1 to 65535"}},
	{name: "url port zero", dsn: "postgres://h1:0/db", err: ErrBadDSN},
	{name: "url port text", dsn: "postgres://h1:abc/db", err: ErrBadDSN, errHas: []string{`"abc"`}},
	{name: "url unencoded slash in password", dsn: "postgres://u:s3c/r3t@h1/db", err: ErrBadDSN, errHas: []string{"percent-encode"}},
	{name: "url unencoded question mark in password", dsn: "postgres://u:s3cr?3t@h1/db", err: ErrBadDSN},
	{name: "url no host", dsn: "postgres:///db", err: ErrBadDSN, errHas: []string{"no host"}},
	{name: "url hosts twice", dsn: "postgres://h1/db?host=h2", err: ErrBadDSN, errHas: []string{"both"}},
	{name: "url query without equals", dsn: "postgres://h1/db?sslmode", err: ErrBadDSN, errHas: []string{"'='"}},
	{name: "url bad percent in db", dsn: "postgres://h1/d%zzb", err: ErrBadDSN, errHas: []string{"percent"}},
	{name: "url bad percent in password", dsn: "postgres://u:s3cr3t%zz@h1/db", err: ErrBadDSN, errHas: []string{"password"}},
	{name: "url percent nul", dsn: "postgres://h1/d%00b", err: ErrBadDSN, errHas: []string{"NUL"}},
	{name: "url bad parameter name", dsn: "postgres://h1/db?a%20b=1", err: ErrBadDSN},
	{name: "url port count", dsn: "postgres://h1,h2,h3/db?port=1,2", err: ErrBadDSN, errHas: []string{"2 ports for 3 hosts"}},
	{name: "url hostaddr", dsn: "postgres://h1/db?hostaddr=10.0.0.1", err: ErrBadDSN, errHas: []string{"hostaddr is not supported"}},
	{name: "other scheme", dsn: "mysql://u:s3cr3t@h/db", err: ErrBadDSN, errHas: []string{`"mysql"`}},
	{name: "kv host empty", dsn: "host=", err: ErrBadDSN, errHas: []string{"host is empty"}},
	{name: "kv key missing", dsn: "=x", err: ErrBadDSN, errHas: []string{"missing keyword"}},
	{name: "kv unterminated quote", dsn: "host=h1 password='s3cr3t", err: ErrBadDSN, errHas: []string{"unterminated", `"password"`}},
	{name: "kv backslash at end of quote", dsn: `host=h1 password='s3cr3t\`, err: ErrBadDSN, errHas: []string{"unterminated"}},
	{name: "kv trailing backslash", dsn: `host=h1 password=s3cr3t\`, err: ErrBadDSN, errHas: []string{"backslash"}},
	{name: "kv port text", dsn: "host=h1 port=abc", err: ErrBadDSN, errHas: []string{`port "abc"`}},
	{name: "kv port count", dsn: "host=h1,h2,h3 port=1,2", err: ErrBadDSN, errHas: []string{"2 ports for 3 hosts"}},
	{name: "kv missing equals", dsn: "host=h1 dbname", err: ErrBadDSN, errHas: []string{`missing '=' after "dbname"`}},
	{name: "kv word after unquoted password", dsn: "host=h1 password=s3cr3t more", err: ErrBadDSN, errHas: []string{"after the password"}},
	{name: "kv password with space unquoted", dsn: "host=h1 password=s3 cr3t", err: ErrBadDSN},
	{name: "kv bad keyword", dsn: "host=h1 a'b=c", err: ErrBadDSN, errHas: []string{"invalid keyword"}},
	{name: "kv no host", dsn: "dbname=shop user=app", err: ErrBadDSN, errHas: []string{"no host"}},
	{name: "kv empty host entry", dsn: "host=h1,,h3", err: ErrBadDSN, errHas: []string{"entry 2 is empty"}},
	{name: "kv host with port", dsn: "host=h1:5433", err: ErrBadDSN, errHas: []string{"IPv6", "port parameter"}},
	{name: "kv duplicate host", dsn: "host=h1,h2,h1 password=s3cr3t", err: ErrBadDSN, errHas: []string{"listed twice"}},
	{name: "kv hostaddr", dsn: "host=h1 hostaddr=127.0.0.1", err: ErrBadDSN, errHas: []string{"hostaddr"}},
	{name: "kv escaped comma in zone", dsn: `host=h1 pgreplica_zone=a\,b`, check: dsnField(func(c Config) string { return c.Zone }, "a,b")},
	{name: "kv nul byte", dsn: "host=h1\x00", err: ErrBadDSN, errHas: []string{"NUL"}},
	{name: "kv host equal to password is scrubbed", dsn: "host=s3cr3t:1 password=s3cr3t", err: ErrBadDSN},
}

func TestParseDSN(t *testing.T) {
	for _, tc := range dsnCases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseDSN(tc.dsn)
			if err != nil && strings.Contains(err.Error(), dsnTestPassword) {
				t.Errorf("error leaks the password: %v", err)
			}
			if tc.err != nil {
				if err == nil {
					t.Fatalf("ParseDSN(%q) = %+v, want an error wrapping %v", tc.dsn, c, tc.err)
				}
				if !errors.Is(err, tc.err) {
					t.Errorf("error %q does not wrap %v", err, tc.err)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseDSN(%q): %v", tc.dsn, err)
			}
			if tc.want != nil && !reflect.DeepEqual(c, *tc.want) {
				t.Errorf("ParseDSN(%q)\n got  %+v\n want %+v", tc.dsn, c, *tc.want)
			}
			if tc.check != nil {
				tc.check(t, c)
			}
			if err := c.validate(); err != nil {
				t.Errorf("parsed config does not validate: %v", err)
			}
			if err := c.withDefaults().validate(); err != nil {
				t.Errorf("parsed config with defaults does not validate: %v", err)
			}
		})
	}
}

// Every option has at least one accepted and one rejected value in the table.
func TestParseDSNCoversEveryOption(t *testing.T) {
	for _, o := range dsnOptions {
		if _, ok := o.bind(&Config{}).(dsnopt.String); ok {
			continue // any text is a valid zone name
		}
		var good, bad bool
		for _, tc := range dsnCases {
			if !strings.Contains(strings.ToLower(tc.dsn), o.name+"=") {
				continue
			}
			if tc.err == nil {
				good = true
			} else if strings.Contains(tc.errHas[0], o.name) {
				bad = true
			}
		}
		if !good || !bad {
			t.Errorf("%s: good value tested %v, bad value tested %v", o.name, good, bad)
		}
	}
}

// The option table in ParseDSN's doc comment matches the options table.
func TestParseDSNDocListsOptions(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "dsn.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "ParseDSN" {
			doc = fd.Doc.Text()
		}
	}
	lines := map[string]string{}
	for l := range strings.SplitSeq(doc, "\n") {
		if f := strings.Fields(l); len(f) > 1 && strings.HasPrefix(f[0], dsnOptionPrefix) {
			lines[f[0]] = strings.Join(f[1:], " ")
		}
	}
	if len(lines) != len(dsnOptions) {
		t.Errorf("ParseDSN doc lists %d options, the table has %d", len(lines), len(dsnOptions))
	}
	for _, o := range dsnOptions {
		if got := lines[o.name]; got != o.doc {
			t.Errorf("ParseDSN doc for %s:\n got  %q\n want %q", o.name, got, o.doc)
		}
	}
}

// No malformed DSN leaks its password into an error, wherever it sits.
func TestParseDSNErrorsHidePassword(t *testing.T) {
	bad := []string{
		"postgres://u:s3cr3t@h1:x/db",
		"postgres://u:s3cr3t@[::1/db",
		"postgres://u:s3cr3t@h1/db?x",
		"postgres://u:s3cr3t@h1/db?pgreplica_x=1",
		"postgres://u:s3c/r3t@h1/db",
		"postgres://u:s3cr3t/@h1/db",
		"postgres://u:s3cr3t?@h1/db",
		"postgres://u:s3cr3t:x@h1:p/db",
		"postgres://u:s3cr3t%@h1/db",
		"postgres://h1/db?password=s3cr3t%zz",
		"postgres://h1/db?password=s3cr3t&port=x",
		"postgres://u:s3cr3t@/db",
		"host=h1 password=s3cr3t port=x",
		"host=h1 password='s3cr3t",
		"host=h1 password=s3cr3t\\",
		"host=h1 password=s3 cr3t",
		"host=h1 password=s3c r3t",
		"host=h1 password=s3cr3t s3cr3t",
		"host=h1 password=x s3cr3t'",
		"host=h1 password=s3cr3t pgreplica_bogus=1",
		"host=s3cr3t,s3cr3t password=s3cr3t",
		"host=s3cr3t:1 password=s3cr3t",
		"host=h1 sslpassword=s3cr3t port=0",
		"host=h1 password=x sslpassword=s3cr3t\\",
		"password=s3cr3t",
		"password=s3cr3t host=h1 pgreplica_zones=a,b",
	}
	for _, dsn := range bad {
		_, err := ParseDSN(dsn)
		if err == nil {
			t.Errorf("ParseDSN(%q) succeeded", dsn)
			continue
		}
		if strings.Contains(err.Error(), dsnTestPassword) || strings.Contains(err.Error(), "r3t") {
			t.Errorf("ParseDSN(%q) error leaks the password: %v", dsn, err)
		}
	}
}

func TestUnknownOptionListsAll(t *testing.T) {
	_, err := ParseDSN("host=h pgreplica_xyzzy_plugh=1")
	if !errors.Is(err, ErrUnknownOption) {
		t.Fatalf("got %v", err)
	}
	for _, o := range dsnOptions {
		if !strings.Contains(err.Error(), o.name) {
			t.Errorf("error %q does not list %s", err, o.name)
		}
	}
	if strings.Contains(err.Error(), "did you mean") {
		t.Errorf("no suggestion expected for a distant name: %v", err)
	}
}

// dsnTrickyPasswords exercise quoting in hostDSN and redacted.
var dsnTrickyPasswords = []string{
	"plain", "with space", `it's`, `back\slash`, `'`, `\`, `\'`, `''`, `a b'c\d e`, " lead and trail ",
	"tab\there", "new\nline", "=eq=", "ünïcödé", "%41", "pass,word", "x' host='evil",
}

func TestHostDSNFormat(t *testing.T) {
	c := Config{
		Hosts:    []Host{dsnHost("db1", 5433)},
		User:     "app",
		Password: `it's \ ok`,
		Database: "shop",
		Params:   map[string]string{"sslmode": "disable", "application_name": "my app", "search_path": "a,b"},
	}
	want := `host='db1' port='5433' user='app' password='it\'s \\ ok' dbname='shop' application_name='my app' search_path='a,b' sslmode='disable'`
	if got := c.hostDSN(c.Hosts[0]); got != want {
		t.Errorf("hostDSN\n got  %s\n want %s", got, want)
	}
	// Port 0 means the default; empty user, password and dbname are left out;
	// reserved keys never reach the inner driver.
	c = Config{Params: map[string]string{"host": "evil", "pgreplica_driver": "pq", "target_session_attrs": "any"}}
	if got, want := c.hostDSN(Host{Addr: "/tmp"}), `host='/tmp' port='5432'`; got != want {
		t.Errorf("hostDSN = %s, want %s", got, want)
	}
}

func TestHostDSNParsesWithPgx(t *testing.T) {
	for i, pw := range dsnTrickyPasswords {
		for _, h := range []Host{dsnHost("db1.example.com", 5433), dsnHost("::1", 6000), dsnHost("/var/run/postgresql", 5432), dsnHost("10.0.0.7", 1)} {
			c := Config{
				Hosts:    []Host{h},
				User:     "user " + pw,
				Password: pw,
				Database: "db " + pw,
				Params:   map[string]string{"application_name": pw, "sslmode": "disable", "search_path": "s" + strconv.Itoa(i)},
			}
			dsn := c.hostDSN(h)
			pc, err := pgx.ParseConfig(dsn)
			if err != nil {
				t.Errorf("pgx.ParseConfig(hostDSN) for password %q: %v", pw, err)
				continue
			}
			if pc.Host != h.Addr || pc.Port != h.Port || pc.User != c.User || pc.Password != pw || pc.Database != c.Database {
				t.Errorf("pgx read back host=%q port=%d user=%q password=%q db=%q from %s",
					pc.Host, pc.Port, pc.User, pc.Password, pc.Database, dsn)
			}
			if pc.RuntimeParams["application_name"] != pw || pc.RuntimeParams["search_path"] != "s"+strconv.Itoa(i) {
				t.Errorf("pgx runtime params %v from %s", pc.RuntimeParams, dsn)
			}
			if len(pc.Fallbacks) != 0 {
				t.Errorf("pgx sees %d fallback hosts in %s", len(pc.Fallbacks), dsn)
			}
		}
	}
}

func TestHostDSNAcceptedByPq(t *testing.T) {
	for _, pw := range dsnTrickyPasswords {
		c := Config{Hosts: []Host{dsnHost("db1", 5433)}, User: "app", Password: pw, Database: "shop",
			Params: map[string]string{"sslmode": "disable", "application_name": pw}}
		dsn := c.hostDSN(c.Hosts[0])
		if _, err := pq.NewConnector(dsn); err != nil {
			t.Errorf("pq.NewConnector(hostDSN) for password %q: %v", pw, err)
		}
		cfg, err := pq.NewConfig(dsn)
		if err != nil {
			t.Errorf("pq.NewConfig(hostDSN) for password %q: %v", pw, err)
			continue
		}
		if cfg.Host != "db1" || cfg.Port != 5433 || cfg.User != "app" || cfg.Password != pw || cfg.Database != "shop" {
			t.Errorf("pq read back host=%q port=%d user=%q password=%q db=%q from %s",
				cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database, dsn)
		}
	}
}

// hostDSN is also read back exactly by ParseDSN's own keyword parser.
func TestHostDSNRoundTrip(t *testing.T) {
	for _, pw := range dsnTrickyPasswords {
		c := Config{Hosts: []Host{dsnHost("h", 5432)}, User: pw, Password: pw, Database: pw,
			Params: map[string]string{"application_name": pw}}
		got, err := ParseDSN(c.hostDSN(c.Hosts[0]))
		if err != nil {
			t.Errorf("ParseDSN(hostDSN) for %q: %v", pw, err)
			continue
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip for %q:\n got  %+v\n want %+v", pw, got, c)
		}
	}
}

func TestRedacted(t *testing.T) {
	c, err := ParseDSN("postgres://app:s3cr3t@h1,h2:5433/shop?sslmode=disable&sslpassword=k3y&application_name=my%20app" +
		"&pgreplica_wait_budget=50ms&pgreplica_zones=a,b&pgreplica_policy=latency&pgreplica_zone=a")
	if err != nil {
		t.Fatal(err)
	}
	got := c.redacted()
	want := "host=h1,h2 port=5432,5433 user=app password=xxxxx dbname=shop application_name='my app' sslmode=disable sslpassword=xxxxx " +
		"pgreplica_wait_budget=50ms pgreplica_policy=latency pgreplica_zone=a pgreplica_zones=a,b"
	if got != want {
		t.Errorf("redacted\n got  %s\n want %s", got, want)
	}
	if strings.Contains(got, dsnTestPassword) || strings.Contains(got, "k3y") {
		t.Errorf("redacted leaks a secret: %s", got)
	}
	back, err := ParseDSN(got)
	if err != nil {
		t.Fatalf("ParseDSN(redacted): %v", err)
	}
	c.Password, c.Params["sslpassword"] = libpqdsn.Masked, libpqdsn.Masked
	if !reflect.DeepEqual(back, c) {
		t.Errorf("ParseDSN(redacted)\n got  %+v\n want %+v", back, c)
	}
	if got := (Config{Password: "pw"}).redacted(); got != "password=xxxxx" {
		t.Errorf("redacted without hosts = %q", got)
	}
	full := Config{Hosts: []Host{dsnHost("h", 0)}}.withDefaults().redacted()
	for _, s := range []string{"pgreplica_driver=pgx", "pgreplica_max_conns_per_host=10", "pgreplica_wait_budget=150ms"} {
		if !strings.Contains(full, s) {
			t.Errorf("redacted defaults %q lack %q", full, s)
		}
	}
}

// FuzzParseDSN: ParseDSN never panics; its errors are typed and never contain
// a password; what it accepts validates, and every host's hostDSN is read
// back exactly by pgx.ParseConfig and by ParseDSN; redacted reads back too.
func FuzzParseDSN(f *testing.F) {
	for _, tc := range dsnCases {
		f.Add(tc.dsn)
	}
	for _, pw := range dsnTrickyPasswords {
		f.Add("host=h password=" + dsnQuoteForTest(pw))
	}
	// Regressions found by fuzzing.
	f.Add("postgres://%2000")
	f.Fuzz(func(t *testing.T, dsn string) {
		c, err := ParseDSN(dsn)
		if err != nil {
			if !errors.Is(err, ErrBadDSN) && !errors.Is(err, ErrUnknownOption) {
				t.Fatalf("untyped error %v", err)
			}
		} else {
			checkParsedDSN(t, c)
		}
		if strings.Contains(dsn, dsnTestPassword) {
			return
		}
		// The same text after a well-formed password, in each position a
		// password can take.
		for _, withPW := range []string{
			"password=" + dsnTestPassword + " " + dsn,
			"password='" + dsnTestPassword + "' " + dsn,
			"postgres://u:" + dsnTestPassword + "@" + dsn,
			"postgres://h/db?password=" + dsnTestPassword + "&" + dsn,
		} {
			if _, err := ParseDSN(withPW); err != nil && strings.Contains(err.Error(), dsnTestPassword) {
				t.Fatalf("ParseDSN(%q) error leaks the password: %v", withPW, err)
			}
		}
	})
}

func dsnQuoteForTest(s string) string {
	var b strings.Builder
	libpqdsn.WriteParam(&b, "", s, true)
	return strings.TrimPrefix(b.String(), "=")
}

// pgxValidatedKeys are keys pgx interprets (and may reject) rather than pass on
// as run-time parameters.
var pgxValidatedKeys = map[string]bool{
	"passfile": true, "connect_timeout": true, "sslmode": true, "sslkey": true, "sslcert": true, "sslcertmode": true,
	"sslrootcert": true, "sslnegotiation": true, "sslpassword": true, "sslsni": true, "krbspn": true, "krbsrvname": true,
	"service": true, "servicefile": true, "min_protocol_version": true, "max_protocol_version": true,
	"channel_binding": true, "require_auth": true, "ssl": true,
	"statement_cache_capacity": true, "description_cache_capacity": true, "default_query_exec_mode": true,
}

func checkParsedDSN(t *testing.T, c Config) {
	t.Helper()
	if err := c.validate(); err != nil {
		t.Fatalf("accepted config does not validate: %v", err)
	}
	if err := c.withDefaults().validate(); err != nil {
		t.Fatalf("accepted config with defaults does not validate: %v", err)
	}
	// pgx reads every host's DSN back (keys it would interpret itself are
	// left out: their values are the user's business, not ours).
	plain := c
	plain.Params = maps.Clone(c.Params)
	maps.DeleteFunc(plain.Params, func(k, _ string) bool { return pgxValidatedKeys[k] })
	for _, h := range c.Hosts {
		if h.Addr == "" || h.Port == 0 {
			t.Fatalf("host %+v", h)
		}
		dsn := plain.hostDSN(h)
		pc, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatalf("pgx.ParseConfig(%q): %v", dsn, err)
		}
		if pc.Host != h.Addr || pc.Port != h.Port || (c.User != "" && pc.User != c.User) ||
			(c.Password != "" && pc.Password != c.Password) || pc.Database != c.Database {
			t.Fatalf("pgx read %q as host=%q port=%d user=%q password=%q db=%q", dsn, pc.Host, pc.Port, pc.User, pc.Password, pc.Database)
		}
		for k, v := range plain.Params {
			if pc.RuntimeParams[k] != v {
				t.Fatalf("pgx read %q: param %s=%q, want %q", dsn, k, pc.RuntimeParams[k], v)
			}
		}
		// Our own parser reads the full DSN, Params included, exactly.
		one := c
		one.Hosts = []Host{{Addr: h.Addr, Port: h.Port}}
		one.Driver, one.MaxConnsPerHost, one.ConnMaxIdleTime, one.ConnMaxLifetime = "", 0, 0, 0
		one.ConnectTimeout, one.Consistency, one.WaitBudget, one.Fallback, one.Policy, one.Zone = 0, 0, 0, 0, 0, ""
		one.MaxLag, one.knobs = 0, tuning.Knobs{}
		back, err := ParseDSN(c.hostDSN(h))
		if err != nil {
			t.Fatalf("ParseDSN(hostDSN %q): %v", c.hostDSN(h), err)
		}
		if !reflect.DeepEqual(back, one) {
			t.Fatalf("ParseDSN(hostDSN %q)\n got  %+v\n want %+v", c.hostDSN(h), back, one)
		}
	}
	// redacted is a DSN that reads back to c, secrets masked.
	r := c.redacted()
	back, err := ParseDSN(r)
	if err != nil {
		t.Fatalf("ParseDSN(redacted %q): %v", r, err)
	}
	want := c
	if want.Password != "" {
		want.Password = libpqdsn.Masked
	}
	want.Params = maps.Clone(c.Params)
	for k := range want.Params {
		if libpqdsn.IsSecret(k) {
			want.Params[k] = libpqdsn.Masked
		}
	}
	if !reflect.DeepEqual(back, want) {
		t.Fatalf("ParseDSN(redacted %q)\n got  %+v\n want %+v", r, back, want)
	}
}
