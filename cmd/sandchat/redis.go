package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat"
)

// Redis deployments SANDCHAT_REDIS_URL can name, in go-redis' URL forms:
//
//	redis://host:6379/0                                      one server
//	redis://seed1:7000?addr=seed2:7001&addr=seed3:7002       a Cluster (rediss:// for TLS);
//	                                                         a lone seed that answers as a
//	                                                         cluster node is a Cluster too
//	redis://sentinel1:26379/0?master_name=M&addr=sentinel2:26379   Sentinel
const (
	redisSingle   = "single"
	redisCluster  = "cluster"
	redisSentinel = "sentinel"
)

// redisTarget is a parsed SANDCHAT_REDIS_URL: exactly one of the options is set.
type redisTarget struct {
	kind     string
	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
}

// parseRedisURL reads the URL without connecting; config validation uses it.
func parseRedisURL(raw string) (redisTarget, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return redisTarget{}, fmt.Errorf("redis URL: %w", err)
	}
	q := u.Query()
	switch {
	case q.Has("master_name"):
		o, err := redis.ParseFailoverURL(raw)
		if err != nil {
			return redisTarget{}, err
		}
		if o.MasterName == "" {
			return redisTarget{}, errors.New("redis URL: master_name is empty (Sentinel needs the name of its master)")
		}
		return redisTarget{kind: redisSentinel, failover: o}, nil
	case q.Has("addr"):
		if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
			return redisTarget{}, fmt.Errorf("redis URL: a Cluster has only database 0, the URL names /%s", p)
		}
		u.Path = ""
		o, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return redisTarget{}, err
		}
		return redisTarget{kind: redisCluster, cluster: o}, nil
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return redisTarget{}, err
	}
	return redisTarget{kind: redisSingle, single: o}, nil
}

// addrs names the servers the URL points at, for messages.
func (r redisTarget) addrs() string {
	switch r.kind {
	case redisCluster:
		return "cluster " + strings.Join(r.cluster.Addrs, ",")
	case redisSentinel:
		return "sentinel " + strings.Join(r.failover.SentinelAddrs, ",") + " master " + r.failover.MasterName
	}
	return r.single.Addr
}

// openRedis makes the client for the URL. A single server's URL that reaches a cluster
// node becomes a cluster client seeded by it, so one node's address is enough.
func openRedis(ctx context.Context, raw string) (redis.UniversalClient, redisTarget, error) {
	t, err := parseRedisURL(raw)
	if err != nil {
		return nil, t, err
	}
	if t.kind == redisSingle {
		c := redis.NewClient(t.single)
		if !clusterNode(ctx, c) {
			return c, t, nil
		}
		_ = c.Close()
		u, _ := url.Parse(raw)
		u.Path = ""
		if t.cluster, err = redis.ParseClusterURL(u.String()); err != nil {
			return nil, t, err
		}
		t.kind, t.single = redisCluster, nil
	}
	switch t.kind {
	case redisSentinel:
		return redis.NewFailoverClient(t.failover), t, nil
	default:
		c := redis.NewClusterClient(t.cluster)
		c.AddHook(reloadOnFailure{c})
		return c, t, nil
	}
}

// clusterNode tells whether the server behind c runs in cluster mode. A server that
// does not answer now is taken as what the URL says; the first real command reports it.
func clusterNode(ctx context.Context, c *redis.Client) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "cluster").Result()
	return err == nil && strings.Contains(info, "cluster_enabled:1")
}

// reloadOnFailure refreshes a cluster client's slot map whenever a command fails for a
// reason that a failover explains (a node refusing connections, CLUSTERDOWN, MOVED
// storms, READONLY from a demoted master...). go-redis reloads it on MOVED and once a
// minute otherwise, so without this, runs on a promoted replica's slots would keep
// going to the dead master for up to a minute. Reloads are coalesced by go-redis.
type reloadOnFailure struct{ c *redis.ClusterClient }

func (h reloadOnFailure) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			h.c.ReloadState(ctx)
		}
		return conn, err
	}
}

func (h reloadOnFailure) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnFailure) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.check(ctx, err)
		return err
	}
}

func (h reloadOnFailure) check(ctx context.Context, err error) {
	if err != nil && sandchat.RedisNotNow(err) {
		h.c.ReloadState(ctx)
	}
}

// redisReady is /readyz's Redis check: every master must answer, so a cluster that lost
// a master (until its replica is promoted and the slot map says so) is not ready.
func redisReady(ctx context.Context, rdb redis.UniversalClient) error {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		info, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return errors.New("the Redis Cluster reports cluster_state:fail")
		}
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.Ping(ctx).Err()
		})
	}
	return rdb.Ping(ctx).Err()
}
