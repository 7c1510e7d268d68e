package probe

import "database/sql/driver"

// Server identifies one incarnation of a server: the system identifier,
// the address and port the server sees itself at, and its postmaster's
// start time. A connection behind an address (an endpoint, a pooler) may
// reach any of several.
type Server struct {
	Sysid   uint64
	Addr    string // inet_server_addr(); "" on a Unix socket
	Port    int
	Started int64 // pg_postmaster_start_time(), µs since the epoch
}

// IdentitySQL asks a new connection which server it reached, whether
// that server was in recovery then, and its backend's process id (a
// pooler's start-up message carries its own). Query ends with the same
// columns as its second line on.
const IdentitySQL = `SELECT (SELECT system_identifier FROM pg_control_system())::text, pg_is_in_recovery(),
 coalesce(host(inet_server_addr()), ''), coalesce(inet_server_port(), 0),
 (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint, pg_backend_pid()`

// IdentityColumns is how many values IdentitySQL answers.
const IdentityColumns = 6

// Identity is IdentitySQL's answer.
type Identity struct {
	Server Server
	// InRecovery: the server was a replica when the connection was made.
	// A primary is never demoted without a restart, which ends its
	// connections, so a connection made to a primary stays one.
	InRecovery bool
	PID        uint32
}

// ParseIdentity reads IdentitySQL's answer.
func ParseIdentity(vals []driver.Value) (Identity, error) {
	srv, err := serverOf(vals[0], vals[2], vals[3], vals[4])
	if err != nil {
		return Identity{}, err
	}
	pid, err := Int(vals[5])
	if err != nil {
		return Identity{}, err
	}
	recovery, _ := vals[1].(bool)
	return Identity{Server: srv, InRecovery: recovery, PID: uint32(pid)}, nil
}

// serverOf reads sysid, address, port and start time.
func serverOf(sysid, addr, port, started driver.Value) (Server, error) {
	id, err := Int(sysid)
	if err != nil {
		return Server{}, err
	}
	p, err := Int(port)
	if err != nil {
		return Server{}, err
	}
	at, err := Int(started)
	if err != nil {
		return Server{}, err
	}
	return Server{Sysid: uint64(id), Addr: Text(addr), Port: int(p), Started: at}, nil
}
