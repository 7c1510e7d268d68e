// Package ent is the ent client generated from ./schema; regenerate it with
// go generate after editing the schema. Two optional features are on:
// sql/execquery adds QueryContext and ExecContext to the client and to
// transactions (the tests ask the server which node answered), and sql/lock
// adds ForUpdate, for a read that decides a write.
package ent

//go:generate go run entgo.io/ent/cmd/ent@v0.14.5 generate --feature sql/execquery,sql/lock ./schema
