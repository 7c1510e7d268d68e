// Package statustest runs the pgreplica command's status subcommand
// (cmd/pgreplica, a module of its own) against a real primary and two
// streaming replicas started by the integration harness. It builds the
// command and runs it as a user does.
package statustest
