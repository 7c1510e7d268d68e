package libpqdsn

import (
	"net/netip"
	"strings"
)

// hiddenHostText ends a host error of a URL whose authority may hold
// pieces of the password.
const hiddenHostText = " (text not shown: it may hold a piece of the password; percent-encode '/', '?', '@' and ':' in the user name and password)"

// parseURL splits the part of a URL DSN after "scheme://", following
// libpq's conninfo_uri_parse.
func parseURL(rest string) (DSN, error) {
	var p DSN
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	p.hideHosts = strings.Contains(tail, "@")
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo := authority[:at]
		authority = authority[at+1:]
		u, pw, hasPW := strings.Cut(userinfo, ":")
		user, err := percentDecode(u)
		if err != nil {
			return p, errorf("user name: %v", err)
		}
		p.Params = append(p.Params, Param{"user", user})
		if hasPW {
			pass, err := percentDecode(pw)
			if err != nil {
				return p, errorf("password: invalid percent-encoding")
			}
			p.Params = append(p.Params, Param{"password", pass})
		}
	}
	if authority != "" {
		for n, entry := range strings.Split(authority, ",") {
			h, port, err := splitURLHost(entry)
			if err != nil {
				if p.hideHosts {
					return p, errorf("host list entry %d: %v"+hiddenHostText, n+1, err.short)
				}
				return p, errorf("host %q: %s", entry, err.short)
			}
			p.netHosts = append(p.netHosts, h)
			p.netPorts = append(p.netPorts, port)
		}
	}
	if strings.HasPrefix(tail, "/") {
		path, _, _ := strings.Cut(tail[1:], "?")
		db, err := percentDecode(path)
		if err != nil {
			return p, errorf("database name: %v", err)
		}
		if db != "" {
			p.Params = append(p.Params, Param{"dbname", db})
		}
	}
	if _, query, ok := strings.Cut(tail, "?"); ok {
		for seg := range strings.SplitSeq(query, "&") {
			if seg == "" {
				continue
			}
			rk, rv, ok := strings.Cut(seg, "=")
			if !ok {
				return p, errorf("query parameter %d has no '=' (want key=value)", len(p.Params)+1)
			}
			k, err := percentDecode(rk)
			if err != nil || !ValidKeyword(k) {
				return p, errorf("invalid query parameter name: want letters, digits, '_' and '.'")
			}
			v, err := percentDecode(rv)
			if err != nil {
				return p, errorf("value of %q: %v", k, err)
			}
			p.Params = append(p.Params, Param{k, v})
		}
	}
	return p, nil
}

// urlHostError is a host-syntax problem described without quoting the text.
type urlHostError struct{ short string }

func (e *urlHostError) Error() string { return e.short }

// splitURLHost splits one authority entry into a decoded host and a port
// (empty when absent).
func splitURLHost(e string) (host, port string, herr *urlHostError) {
	if strings.HasPrefix(e, "[") {
		end := strings.IndexByte(e, ']')
		if end < 0 {
			return "", "", &urlHostError{"missing ']' after IPv6 address"}
		}
		after := e[end+1:]
		if after != "" {
			if after[0] != ':' {
				return "", "", &urlHostError{"unexpected text after ']'"}
			}
			port = after[1:]
		}
		h, err := percentDecode(e[1:end])
		if err != nil {
			return "", "", &urlHostError{err.Error()}
		}
		if a, err := netip.ParseAddr(h); err != nil || !a.Is6() {
			return "", "", &urlHostError{"brackets must hold an IPv6 address"}
		}
		return h, port, nil
	}
	raw := e
	if i := strings.LastIndexByte(e, ':'); i >= 0 {
		raw, port = e[:i], e[i+1:]
		if strings.IndexByte(raw, ':') >= 0 {
			return "", "", &urlHostError{"an IPv6 address must be written in brackets, as in [::1]:5432"}
		}
	}
	h, err := percentDecode(raw)
	if err != nil {
		return "", "", &urlHostError{err.Error()}
	}
	// Like entries of a host parameter, decoded names lose surrounding spaces.
	return strings.Trim(h, Spaces), port, nil
}
