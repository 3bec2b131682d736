package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterRedis is a real Redis Cluster of Debian's redis-server on loopback: three
// masters and a replica of each, no persistence, a short node timeout so a killed
// master's replica is promoted in seconds.
type clusterRedis struct {
	t     *testing.T
	ports []int
	procs map[int]*exec.Cmd
}

func startClusterRedis(t *testing.T) *clusterRedis {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found: install Redis (`make services` does)", bin)
		}
	}
	c := &clusterRedis{t: t, procs: map[int]*exec.Cmd{}}
	dir := t.TempDir()
	for range 6 {
		port := clusterPort(t, c.ports)
		cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
			"--cluster-node-timeout", "2000", "--save", "", "--appendonly", "no", "--dir", dir)
		if err := cmd.Start(); err != nil {
			t.Fatalf("start redis-server: %v", err)
		}
		go func() { _ = cmd.Wait() }()
		c.ports, c.procs[port] = append(c.ports, port), cmd
	}
	t.Cleanup(func() {
		for _, p := range c.procs {
			if p != nil {
				_ = p.Process.Kill()
			}
		}
	})
	for _, port := range c.ports {
		rdb := redis.NewClient(&redis.Options{Addr: addrOf(port)})
		eventually(t, 10*time.Second, "redis-server to answer", func() bool { return rdb.Ping(context.Background()).Err() == nil })
		_ = rdb.Close()
	}
	args := []string{"--cluster", "create"}
	for _, p := range c.ports {
		args = append(args, addrOf(p))
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, port := range c.ports {
		eventually(t, 30*time.Second, "the cluster to be ok on every node", func() bool { return c.info(port, "cluster_state") == "ok" })
	}
	return c
}

func addrOf(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// clusterPort is a free port whose cluster bus port (+10000) is free too.
func clusterPort(t *testing.T, taken []int) int {
	for range 200 {
		p := 20000 + rand.IntN(30000)
		if slices.Contains(taken, p) {
			continue
		}
		a, err := net.Listen("tcp", addrOf(p))
		if err != nil {
			continue
		}
		b, err := net.Listen("tcp", addrOf(p+10000))
		_ = a.Close()
		if err != nil {
			continue
		}
		_ = b.Close()
		return p
	}
	t.Fatal("no free port pair for a cluster node")
	return 0
}

// URL is the seed list in go-redis' cluster URL form.
func (c *clusterRedis) URL() string {
	return fmt.Sprintf("redis://%s?addr=%s&addr=%s", addrOf(c.ports[0]), addrOf(c.ports[1]), addrOf(c.ports[2]))
}

func (c *clusterRedis) info(port int, field string) string {
	rdb := redis.NewClient(&redis.Options{Addr: addrOf(port), MaxRetries: -1})
	defer rdb.Close()
	s, err := rdb.ClusterInfo(context.Background()).Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// masterOf is the port of the master serving key's slot now, as a live node sees it.
func (c *clusterRedis) masterOf(key string) int {
	for _, port := range c.ports {
		if c.procs[port] == nil {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: addrOf(port), MaxRetries: -1})
		slot, err1 := rdb.ClusterKeySlot(context.Background(), key).Result()
		slots, err2 := rdb.ClusterSlots(context.Background()).Result()
		_ = rdb.Close()
		if err1 != nil || err2 != nil {
			continue
		}
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
				_, p, _ := net.SplitHostPort(s.Nodes[0].Addr)
				n, _ := strconv.Atoi(p)
				return n
			}
		}
	}
	c.t.Fatalf("no live node knows the master of %s", key)
	return 0
}

func (c *clusterRedis) kill(port int) {
	_ = c.procs[port].Process.Kill()
	c.procs[port] = nil
}

// TestRedisCluster runs two nodes on a real Redis Cluster (3 masters, 3 replicas) and
// kills the master that holds the conversations' sessions while runs go on from both
// nodes: no run answers 500, no acknowledged run is lost or applied twice, runs succeed
// again within 15 s of the replica's promotion, /readyz says Redis is not ready while it
// cannot serve, and toasts and turn events cross nodes with seq contiguous.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cluster := startClusterRedis(t)
	// One node's address is enough: it answers as a cluster node, so the client is one.
	lone, target, err := openRedis(context.Background(), "redis://"+addrOf(cluster.ports[3]))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := lone.(*redis.ClusterClient); !ok || target.kind != redisCluster {
		t.Errorf("a lone seed of a cluster made a %T (%s), want a cluster client", lone, target.kind)
	}
	_ = lone.Close()
	e := newEnv(t)
	onCluster := func(c *Config, _ *Main) { c.RedisURL = cluster.URL() }
	nodeA := e.node(withEngine(e.redisPrefix), onCluster)
	awaitEngine(t, nodeA)
	nodeB := e.node(withEngine(e.redisPrefix), onCluster)
	awaitEngine(t, nodeB)

	alice, _ := nodeA.user(t, "alice", false)
	aliceB := nodeB.as(t, alice.token)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	const convs = 3
	var ids []int64
	for range convs {
		conv := alice.createConversation(agent.ID)
		alice.run(conv, "seen = []")
		ids = append(ids, conv)
	}

	// Runs from both nodes on every conversation, each appending its own number.
	type outcome struct {
		conv, n int64
		status  int
		retry   string
		ok      bool
		at      time.Time
		body    string
	}
	var mu sync.Mutex
	var outcomes []outcome
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, conv := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int64(i * 100000); ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				c := alice
				if n%2 == 1 {
					c = aliceB
				}
				resp, body := c.rawDo("POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": fmt.Sprintf("seen.append(%d)", n)})
				var r runJSON
				_ = json.Unmarshal(body, &r)
				o := outcome{conv: conv, n: n, status: resp.StatusCode, retry: resp.Header.Get("Retry-After"), ok: resp.StatusCode == 200 && r.Status == "success", at: time.Now(), body: string(body)}
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
				if !o.ok {
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	acked := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, o := range outcomes {
			if o.ok {
				n++
			}
		}
		return n
	}
	eventually(t, 60*time.Second, "runs to go through before the failover", func() bool { return acked() >= 3*convs })

	// Kill the master serving the first conversation's session, mid-load.
	victim := cluster.masterOf(fmt.Sprintf("{conv:%d}", ids[0]))
	killed := time.Now()
	cluster.kill(victim)
	sawNotReady := false
	var promoted time.Time
	eventually(t, 60*time.Second, "a replica to be promoted", func() bool {
		var ready struct{ Checks map[string]string }
		if resp, body := alice.rawDo("GET", "/readyz", nil); resp.StatusCode == 503 {
			_ = json.Unmarshal(body, &ready)
			sawNotReady = sawNotReady || ready.Checks["redis"] != "ok"
		}
		for _, p := range cluster.ports {
			if p != victim && cluster.procs[p] != nil && cluster.info(p, "cluster_state") == "ok" && cluster.masterOf(fmt.Sprintf("{conv:%d}", ids[0])) != victim {
				promoted = time.Now()
				return true
			}
		}
		return false
	})
	t.Logf("master %d killed; replica promoted %s later", victim, promoted.Sub(killed).Round(time.Millisecond))
	if !sawNotReady {
		t.Log("/readyz was never seen 503 during the failover (the cluster may have recovered between polls)")
	}
	// Runs go on well past the promotion, so recovery can be judged.
	settle := 15 * time.Second
	eventually(t, 60*time.Second, "readiness after the promotion", func() bool {
		resp, _ := alice.rawDo("GET", "/readyz", nil)
		return resp.StatusCode == 200
	})
	time.Sleep(time.Until(promoted.Add(settle + 5*time.Second)))
	close(stop)
	wg.Wait()

	// No 500: every failure is a 503 or 429 with Retry-After.
	var lastFailure time.Time
	okAfter := 0
	for _, o := range outcomes {
		switch {
		case o.ok:
			if o.at.After(promoted.Add(settle)) {
				okAfter++
			}
		case o.status == http.StatusServiceUnavailable || o.status == http.StatusTooManyRequests:
			if o.retry == "" {
				t.Errorf("a %d without Retry-After: %s", o.status, o.body)
			}
			lastFailure = o.at
		default:
			t.Errorf("run %d answered %d: %s", o.n, o.status, o.body)
			lastFailure = o.at
		}
	}
	failures := len(outcomes) - acked()
	t.Logf("%d runs, %d acknowledged, %d refused; last refusal %s after the promotion", len(outcomes), acked(), failures, lastFailure.Sub(promoted).Round(time.Millisecond))
	if lastFailure.After(promoted.Add(settle)) {
		t.Errorf("runs still failed %s after the promotion (want within %s)", lastFailure.Sub(promoted).Round(time.Millisecond), settle)
	}
	if okAfter == 0 {
		t.Errorf("no run succeeded after the cluster recovered")
	}

	// Every acknowledged run's effect is there once; no run is there twice.
	for _, conv := range ids {
		var r runJSON
		aliceB.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": "print(seen)"}, &r)
		var seen []int64
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &seen); err != nil {
			t.Fatalf("conversation %d: %v: %q", conv, err, r.Stdout)
		}
		count := map[int64]int{}
		for _, n := range seen {
			count[n]++
			if count[n] == 2 {
				t.Errorf("conversation %d: run %d applied twice", conv, n)
			}
		}
		for _, o := range outcomes {
			if o.conv == conv && o.ok && count[o.n] == 0 {
				t.Errorf("conversation %d: acknowledged run %d lost", conv, o.n)
			}
		}
	}

	// Toasts and turn events still cross nodes, with seq contiguous for the conversation.
	tab := alice.socket()
	aliceB.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", ids[1]), map[string]any{"enabled": true}, nil)
	if f := tab.expect("toast"); !strings.Contains(string(f.Data), "Internal tools configuration updated") {
		t.Errorf("toast %s", f.Data)
	}
	turn := alice.post(ids[0], py("print(len(seen) > 0)"))
	if st := alice.finishTurn(ids[0], turn).Status; st != "completed" {
		t.Fatalf("turn %s", st)
	}
	resumed := aliceB.socket()
	resumed.subscribe(ids[0], ptr(int64(0)))
	var seqs []int64
	for {
		f := resumed.expect2()
		seqs = append(seqs, f.Seq)
		if f.Type == "turn.completed" {
			break
		}
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("seq not contiguous across the failover: %v", seqs)
		}
	}
}
