// Package statustest runs the pgreplica command's status subcommand
// (cmd/pgreplica of the driver module) against a real primary and two
// streaming replicas started by the integration harness. It builds the
// command and runs it as a user does, so that the command itself links no
// part of the harness.
package statustest
