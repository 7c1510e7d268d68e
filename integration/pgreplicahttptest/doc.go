// Package pgreplicahttptest runs the HTTP middleware of pgreplicahttp
// against a real primary and two streaming replicas started by the
// integration harness: redirect after POST, a second tab through a token
// store, streaming and hijacked responses, a GET that writes. The unit
// tests that need no cluster stay in pgreplicahttp.
package pgreplicahttptest
