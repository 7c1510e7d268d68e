package integration

import (
	"os"
	"os/exec"
)

// watchdog is a small shell process that outlives a test binary which dies
// without calling Close (a panic in a test, a -timeout, a signal): it waits
// for end-of-file on a pipe that only this process holds open, then runs
// the rest of its script, which removes the cluster. It is best effort;
// Close does the same work properly.
type watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File // write end; closing it lets the watchdog act
}

// localWatchdogScript runs as /bin/sh -c script sh <cluster dir> [keep]. It
// shuts down (immediate mode, SIGKILL after five seconds) every postmaster
// recorded in the cluster directory and removes the directory, unless its
// second argument is "keep".
const localWatchdogScript = `
cat >/dev/null 2>&1
pids=
for d in "$1"/*/data; do
	[ -f "$d/postmaster.pid" ] || continue
	p=$(head -n 1 "$d/postmaster.pid")
	case "$p" in ''|*[!0-9]*) continue ;; esac
	if [ -d /proc/self ]; then
		# Only a postmaster that works in this data directory: the pid
		# may be stale and reused.
		[ "$(readlink "/proc/$p/cwd" 2>/dev/null)" = "$(cd "$d" && pwd -P)" ] || continue
	fi
	kill -QUIT "$p" 2>/dev/null && pids="$pids $p"
done
i=0
while [ -n "$pids" ] && [ $i -lt 100 ]; do
	alive=
	for p in $pids; do
		if [ -d /proc/self ]; then
			[ -e "/proc/$p/cwd" ] && alive="$alive $p" # not for zombies
		else
			kill -0 "$p" 2>/dev/null && alive="$alive $p"
		fi
	done
	pids=$alive
	[ $i -eq 50 ] && [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
	sleep 0.1 2>/dev/null || sleep 1
	i=$((i+1))
done
[ "$2" = keep ] || rm -rf "$1"
`

// dockerWatchdogScript runs as /bin/sh -c script sh <cluster name>. It
// removes the cluster's containers and network with the docker command,
// if there is one.
const dockerWatchdogScript = `
cat >/dev/null 2>&1
command -v docker >/dev/null 2>&1 || exit 0
ids=$(docker ps -aq --filter "label=pgreplica.cluster=$1")
[ -n "$ids" ] && docker rm -f -v $ids >/dev/null 2>&1
docker network rm "$1" >/dev/null 2>&1
exit 0
`

// startWatchdog starts a watchdog that runs script with args, or returns
// nil if it cannot.
func startWatchdog(script string, args ...string) *watchdog {
	r, w, err := os.Pipe()
	if err != nil {
		return nil
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.Stdin = r
	// A process group of its own: a Ctrl-C aimed at the test must not
	// kill the watchdog before it cleans up.
	cmd.SysProcAttr = ownGroup()
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil
	}
	return &watchdog{cmd: cmd, pipe: w}
}

// stop releases the watchdog after Close has cleaned up, and reaps it.
func (d *watchdog) stop() {
	if d == nil {
		return
	}
	d.pipe.Close()
	_ = d.cmd.Wait()
}
