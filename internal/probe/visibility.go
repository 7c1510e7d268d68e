package probe

// What a session's primary read asks when it follows one of its replica
// reads (the root's visibility.go says why): the transactions the
// primary's snapshot does not show yet, then how many of those the
// replica shows as committed.

// PrimaryHiddenSQL lists the transactions the primary's snapshot (the
// statement's own) does not show yet, as an xid8 array: in progress in
// the snapshot, or assigned after its xmax (up to the next transaction
// id, which age() reads without assigning one).
const PrimaryHiddenSQL = `SELECT coalesce(array_agg(x), '{}')::text
 FROM pg_current_snapshot() AS s,
 LATERAL (SELECT pg_snapshot_xip(s) AS x
  UNION ALL
  SELECT (pg_snapshot_xmax(s)::text::numeric + g)::text::xid8
   FROM generate_series(0, age(xid(pg_snapshot_xmax(s))) - 1) AS g) AS t`

// ReplicaShowsSQL counts those a replica shows as committed, given
// PrimaryHiddenSQL's answer as $1. An id past its own xmax is one it has
// not seen end (and pg_xact_status refuses ids from its future): the CASE
// keeps them from the function.
const ReplicaShowsSQL = `SELECT count(*) FROM unnest($1::text::xid8[]) AS x
 WHERE CASE WHEN x < pg_snapshot_xmax(pg_current_snapshot()) THEN pg_xact_status(x) END = 'committed'`
