package main

import (
	"strings"
	"testing"
)

// TestParseRedisURL: SANDCHAT_REDIS_URL names one server, a Cluster or Sentinel in
// go-redis' URL forms, and a URL that fits none is refused with what is wrong.
func TestParseRedisURL(t *testing.T) {
	for _, tc := range []struct {
		url, kind, addrs, err string
	}{
		{"redis://127.0.0.1:6379/0", redisSingle, "127.0.0.1:6379", ""},
		{"rediss://:pw@cache.internal:6380/2", redisSingle, "cache.internal:6380", ""},
		{"redis://10.0.0.1:7000?addr=10.0.0.2:7001&addr=10.0.0.3:7002", redisCluster, "cluster 10.0.0.1:7000,10.0.0.2:7001,10.0.0.3:7002", ""},
		{"rediss://:pw@n1:7000/0?addr=n2:7000", redisCluster, "cluster n1:7000,n2:7000", ""},
		{"redis://s1:26379/0?master_name=mymaster&addr=s2:26379", redisSentinel, "sentinel s1:26379,s2:26379 master mymaster", ""},
		{"redis://n1:7000/3?addr=n2:7000", "", "", "only database 0"},
		{"redis://s1:26379/0?master_name=&addr=s2:26379", "", "", "master_name is empty"},
		{"http://n1:7000?addr=n2:7000", "", "", "invalid URL scheme"},
		{"redis://n1:7000?addr=n2:7000&pool_size=x", "", "", "pool_size"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			got, err := parseRedisURL(tc.url)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.kind != tc.kind || got.addrs() != tc.addrs {
				t.Fatalf("%s %s, want %s %s", got.kind, got.addrs(), tc.kind, tc.addrs)
			}
		})
	}
}
