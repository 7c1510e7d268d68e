package libpqdsn

import (
	"reflect"
	"strings"
	"testing"
)

func TestHosts(t *testing.T) {
	for _, tc := range []struct {
		dsn    string
		want   []HostPort
		errHas string
	}{
		{dsn: "host=h1", want: []HostPort{{"h1", 5432}}},
		{dsn: "host=h1,h2 port=6000", want: []HostPort{{"h1", 6000}, {"h2", 6000}}},
		{dsn: "host=h1,h2,h3 port=6000,,6002", want: []HostPort{{"h1", 6000}, {"h2", 5432}, {"h3", 6002}}},
		{dsn: "host='h1, h2' port=' 1, 2'", want: []HostPort{{"h1", 1}, {"h2", 2}}},
		{dsn: "host=::1,/var/run/postgresql,fe80::1%eth0 port=5433", want: []HostPort{{"::1", 5433}, {"/var/run/postgresql", 5433}, {"fe80::1%eth0", 5433}}},
		{dsn: "host=h1 host=h2 port=1 port=2", want: []HostPort{{"h2", 2}}},
		{dsn: "postgres://h1:5433,h2/db?port=6000", want: []HostPort{{"h1", 5433}, {"h2", 6000}}},
		{dsn: "postgres://:6000/db?host=a,b", want: []HostPort{{"a", 6000}, {"b", 6000}}},
		{dsn: "dbname=shop", errHas: "no host: name at least one server"},
		{dsn: "postgres:///db", errHas: "no host"},
		{dsn: "postgres://h1/db?host=h2", errHas: "hosts given both in the URL and in the host parameter"},
		{dsn: "postgres://:1,:2/db?host=a,b,c", errHas: "2 ports in the URL for 3 hosts"},
		{dsn: "host=h1,h2,h3 port=1,2", errHas: "2 ports for 3 hosts: give one port for all hosts or one per host"},
		{dsn: "host=", errHas: "host is empty"},
		{dsn: "host=h1,,h3", errHas: "host list entry 2 is empty"},
		{dsn: "host=h1:5433", errHas: `host "h1:5433": a ':' belongs only in an IPv6 address`},
		{dsn: "host=h1 port=abc", errHas: `port "abc": want a number from 1 to 65535`},
		{dsn: "host=h1 port=+1", errHas: `port "+1"`},
		{dsn: "postgres://h1:65536/db", errHas: `port "65536" of host 1: want a number from 1 to 65535`},
		{dsn: "postgres://h1:0/db", errHas: `port "0" of host 1`},
		{dsn: "host=h1,h2,h1", errHas: `host "h1" port 5432 is listed twice (entries 1 and 3)`},
		{dsn: "postgres://u:p@h1:x/db?a=@", errHas: "port (not shown) of host 1: want a number from 1 to 65535 (text not shown"},
	} {
		got, err := hostsOf(tc.dsn)
		if tc.errHas != "" {
			if _, ok := err.(*Error); !ok || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("Hosts of %q: error %v, want an *Error containing %q", tc.dsn, err, tc.errHas)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Hosts of %q = %v, %v; want %v", tc.dsn, got, err, tc.want)
		}
	}
}

func TestSplitList(t *testing.T) {
	if got, want := SplitList(" a ,b,,\tc "), []string{"a", "b", "", "c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("SplitList = %q, want %q", got, want)
	}
}
