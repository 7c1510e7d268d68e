// Package stmtclass decides, from the SQL text alone, where a statement
// may run: the classifier (Classify) and a cache of its answers (Cache).
// It needs no router: no connection, no topology, no clock.
//
// The classifier is deliberately conservative: a statement is a read only
// when its shape proves it (SELECT, VALUES, TABLE, SHOW, WITH … SELECT,
// EXPLAIN without ANALYZE) and nothing in it writes, locks rows, or calls a
// function known to have side effects or to fail on a hot standby. Anything
// it cannot prove goes to the primary. A user function that writes is
// still routed to a replica; the standby then answers SQLSTATE 25006 and the
// router retries on the primary.
//
// It runs on every statement, so it is one pass over the string by a small
// byte lexer that follows PostgreSQL's scan.l closely enough to skip string
// literals, quoted identifiers, dollar-quoted bodies and (nested) comments,
// and it does not allocate. It assumes standard_conforming_strings=on (the
// default since PostgreSQL 9.1, and required by pgx): a backslash escapes a
// quote only in E'…' strings.
//
// The package is internal: the router is its only consumer, and the rules
// may tighten without breaking callers.
package stmtclass
