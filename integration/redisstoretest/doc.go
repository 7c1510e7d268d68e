// Package redisstoretest runs redisstore behind pgreplicahttp's middleware
// against a real primary and two streaming replicas started by the
// integration harness and the Redis on 127.0.0.1:6379 (or
// $PGREPLICA_REDIS_ADDR): a second tab served by another application
// instance reads its own write through the shared token store. It has no
// code of its own, only tests; the store's own tests, which need Redis
// but no cluster, stay in redisstore, which so does not require the
// harness.
package redisstoretest
