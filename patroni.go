package pgreplica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Servers discovered from Patroni's REST API: PatroniLookup answers a host
// name with the cluster's members, so that the connector follows them as it
// follows a name's DNS answers (resolve.go): a member that joins becomes a
// node, probed, taking reads once it is proven fresh; one that leaves is
// retired (no new statements; those running finish). Patroni says who
// exists, never who is fresh or which is the primary: roles and freshness
// are proven on the servers, as for any host.

// PatroniLookup returns a LookupFunc that answers name with the members
// of a Patroni cluster, as "ip:port" addresses, read from its REST API
// (GET /cluster on the first of urls that answers, e.g.
// "http://pg1:8008"). A member tagged noloadbalance is left out unless it
// leads (it gets no reads, and writes when it is the primary). Other names
// are resolved by the system resolver.
//
// Give the name as the one host of the Config:
//
//	cfg := pgreplica.Config{
//		Hosts:      []pgreplica.Host{{Addr: "shop-cluster"}},
//		LookupFunc: pgreplica.PatroniLookup("shop-cluster", "http://pg1:8008", "http://pg2:8008"),
//		...
//	}
//
// The members are asked again every 2 seconds while the handle runs. When
// no url answers, the members last listed stay in force and Nodes says so.
func PatroniLookup(name string, urls ...string) LookupFunc {
	return func(ctx context.Context, host string) ([]string, error) {
		if host != name {
			return net.DefaultResolver.LookupHost(ctx, host)
		}
		var errs []error
		for _, u := range urls {
			addrs, err := patroniMembers(ctx, u)
			if err == nil {
				return addrs, nil
			}
			errs = append(errs, err)
		}
		if len(errs) == 0 {
			errs = append(errs, errors.New("no Patroni REST url given"))
		}
		return nil, fmt.Errorf("pgreplica: Patroni members of %s: %w", name, errors.Join(errs...))
	}
}

// patroniCluster is what Patroni's GET /cluster answers, the parts used.
type patroniCluster struct {
	Members []struct {
		Name string         `json:"name"`
		Role string         `json:"role"`
		Host string         `json:"host"`
		Port int            `json:"port"`
		Tags map[string]any `json:"tags"`
	} `json:"members"`
}

// patroniMembers asks one Patroni REST API for the members' addresses.
func patroniMembers(ctx context.Context, url string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/cluster", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", req.URL, resp.Status)
	}
	var cl patroniCluster
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&cl); err != nil {
		return nil, fmt.Errorf("%s: %w", req.URL, err)
	}
	var addrs []string
	for _, m := range cl.Members {
		leader := m.Role == "leader" || m.Role == "standby_leader"
		if m.Host == "" || m.Port <= 0 || m.Port > 65535 || tagged(m.Tags, "noloadbalance") && !leader {
			continue
		}
		ips := []string{m.Host}
		if net.ParseIP(m.Host) == nil {
			if ips, err = net.DefaultResolver.LookupHost(ctx, m.Host); err != nil {
				return nil, fmt.Errorf("member %s: %w", m.Name, err)
			}
		}
		for _, ip := range ips {
			addrs = append(addrs, net.JoinHostPort(ip, strconv.Itoa(m.Port)))
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s: no member to use", req.URL)
	}
	return addrs, nil
}

// tagged reports whether a Patroni tag is set true (Patroni writes tags as
// given in its configuration: true, "true", ...).
func tagged(tags map[string]any, tag string) bool {
	switch v := tags[tag].(type) {
	case bool:
		return v
	case string:
		b, _ := strconv.ParseBool(v)
		return b
	}
	return false
}
