package redisstoretest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pgreplica/pgreplica/integration"
	"github.com/redis/go-redis/v9"
)

// cluster is the primary and two replicas of TestSecondTabAcrossInstances
// (nil without PostgreSQL: it skips).
var cluster *integration.Cluster

func TestMain(m *testing.M) {
	os.Exit(integration.Main(m, integration.Options{Replicas: 2}, &cluster))
}

// redisAddrEnv overrides the address of the test Redis, as in redisstore's
// own tests.
const redisAddrEnv = "PGREPLICA_REDIS_ADDR"

// needRedis returns a client of the Redis on 127.0.0.1:6379 (or
// $PGREPLICA_REDIS_ADDR) and a key prefix unique to t, whose keys are
// deleted at cleanup. Without a Redis it skips t, or fails it under
// PGREPLICA_INTEGRATION=require.
func needRedis(t *testing.T) (*redis.Client, string) {
	t.Helper()
	addr := os.Getenv(redisAddrEnv)
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		msg := fmt.Sprintf("no Redis at %s (%v); start redis-server or set %s", addr, err, redisAddrEnv)
		if os.Getenv(integration.RequireEnv) == "require" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	prefix := fmt.Sprintf("pgreplica-test:%s:%d:", t.Name(), time.Now().UnixNano())
	t.Cleanup(func() {
		defer rdb.Close()
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("cleaning up %s*: %v", prefix, err)
		}
	})
	return rdb, prefix
}
