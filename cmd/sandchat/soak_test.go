package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandchat/sandchat/migrations/testenv"
)

// TestSoak drives two server processes on one database and Redis for SANDCHAT_SOAK
// (e.g. 10m; skipped when unset: `make soak` runs it) with conversations that run
// Python one cell after another, through REST runs and through turns, some cancelled
// while they start, with sessions evicted and restored all along; a third of the way
// in one node is killed with SIGKILL and started again. Every cell appends its own id
// to a list that lives in the session. At the end, each conversation's list must be
// exactly the cells its record says succeeded, in order: nothing acknowledged lost,
// nothing applied twice, and the durable outcome agrees with what the session holds.
// No request may answer 500, and every conversation must still run code.
func TestSoak(t *testing.T) {
	span, err := time.ParseDuration(os.Getenv("SANDCHAT_SOAK"))
	if os.Getenv("SANDCHAT_SOAK") == "" {
		t.Skip("SANDCHAT_SOAK is not set (e.g. SANDCHAT_SOAK=10m, as `make soak` runs it)")
	}
	if err != nil || span < 10*time.Second {
		t.Fatalf("SANDCHAT_SOAK=%q: want a duration of at least 10s", os.Getenv("SANDCHAT_SOAK"))
	}
	e := newEnv(t)
	e.copyBase(baseSeed, e.redisPrefix)
	bin := buildSandchat(t)
	env := append(os.Environ(),
		"SANDCHAT_DATABASE_URL="+e.databaseURL,
		"SANDCHAT_REDIS_URL="+testenv.RedisURL(),
		"SANDCHAT_REDIS_PREFIX="+e.redisPrefix,
		"SANDCHAT_LLM_PROVIDER=builtin",
		"SANDCHAT_LOG_LEVEL=warn",
		"SANDCHAT_RATE_EXECUTIONS=0", "SANDCHAT_RATE_MESSAGES=0",
		"SANDCHAT_SANDBOX_ENABLED=true",
		"SANDCHAT_SANDBOX_PACKAGE_CDN=off",
		// Sessions leave memory often, so most runs of a conversation restore: from
		// the heap, or by replaying its cells when the heap was not saved yet.
		"SANDCHAT_SANDBOX_MAX_LIVE=2",
		"SANDCHAT_SANDBOX_IDLE_TIMEOUT=3s",
		"SANDCHAT_SANDBOX_WARM_POOL=1", "SANDCHAT_SANDBOX_WARM_POOL_MAX=2", "SANDCHAT_SANDBOX_WARM_SPARES=1",
		"SANDCHAT_SANDBOX_MAX_PROCESSES=6",
		"SANDCHAT_SANDBOX_ADMIT_TIMEOUT=2m",
	)
	var stdout, stderr bytes.Buffer
	create := exec.Command(bin, "user", "create", "--name", "soak")
	create.Env, create.Stdout, create.Stderr = env, &stdout, &stderr
	if err := create.Run(); err != nil {
		t.Fatalf("user create: %v\n%s", err, stderr.String())
	}
	token := strings.TrimSpace(stdout.String())
	nodes := []*soakNode{{t: t, bin: bin, env: env, addr: freeAddr(t)}, {t: t, bin: bin, env: env, addr: freeAddr(t)}}
	for _, n := range nodes {
		n.start()
		t.Cleanup(n.kill)
	}
	setup := &client{t: t, base: "http://" + nodes[0].addr, token: token}
	coder := setup.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	for _, n := range nodes {
		cl := &client{t: t, base: "http://" + n.addr, token: token}
		eventually(t, 3*time.Minute, "the engine of "+n.addr+" to run code", func() bool {
			conv := cl.createConversation(coder.ID)
			return cl.do("POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", conv), map[string]any{"code": "1"}, nil) == 200
		})
	}

	const conversations = 6
	st := &soakStats{byStatus: map[string]int{}, byFrom: map[string]int{}, byCode: map[int]int{}}
	deadline := time.Now().Add(span)
	var wg sync.WaitGroup
	convs := make([]*soakConv, conversations)
	for i := range convs {
		convs[i] = &soakConv{id: setup.createConversation(coder.ID), acked: map[int]bool{}}
		wg.Add(1)
		go func(c *soakConv, seed uint64) {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(seed, 7))
			for time.Now().Before(deadline) {
				n := nodes[rnd.IntN(len(nodes))]
				if !n.up() {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				if rnd.IntN(5) == 0 {
					c.turn(st, n, token, rnd)
				} else {
					c.run(st, n, token)
				}
				// Gaps past the idle timeout now and then: the next run restores.
				if rnd.IntN(6) == 0 {
					time.Sleep(time.Duration(3000+rnd.IntN(1500)) * time.Millisecond)
				}
			}
		}(convs[i], uint64(i+1))
	}

	// A third of the way in, one node dies without warning and comes back 5 s later.
	select {
	case <-time.After(span / 3):
	case <-t.Context().Done():
	}
	nodes[1].kill()
	t.Logf("killed node %s at %s", nodes[1].addr, time.Now().Format(time.TimeOnly))
	time.Sleep(5 * time.Second)
	nodes[1].start()
	wg.Wait()

	// Every conversation runs code again, on either node, and its list is its record.
	db := m2db(t, e)
	for _, c := range convs {
		for _, n := range nodes {
			cl := &client{t: t, base: "http://" + n.addr, token: token}
			var r runJSON
			var code int
			eventually(t, 2*time.Minute, fmt.Sprintf("conversation %d to run on %s", c.id, n.addr), func() bool {
				code = cl.do("POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", c.id),
					map[string]any{"code": "L = globals().setdefault('L', []); print(','.join(map(str, L)))"}, &r)
				return code == 200 && r.Status == "success"
			})
			held := parseIDs(r.Stdout)
			rows, err := db.Query(context.Background(), `select status, code from executions where conversation_id = $1 order by id`, c.id)
			if err != nil {
				t.Fatal(err)
			}
			var succeeded []int
			stoppedAfter := map[int]bool{}
			for rows.Next() {
				var status string
				var code []byte
				if err := rows.Scan(&status, &code); err != nil {
					t.Fatal(err)
				}
				if m := cellID.FindSubmatch(code); m != nil {
					id, _ := strconv.Atoi(string(m[1]))
					switch status {
					case "success":
						succeeded = append(succeeded, id)
					case "stopped", "error", "timeout":
						// A cell stopped after its last line ran keeps its append.
						stoppedAfter[id] = true
					}
				}
			}
			rows.Close()
			seen := map[int]int{}
			for _, id := range held {
				seen[id]++
				if seen[id] > 1 {
					t.Errorf("conversation %d: cell %d applied twice: %v", c.id, id, held)
				}
			}
			for id := range c.acked {
				if seen[id] == 0 {
					t.Errorf("conversation %d: cell %d was acknowledged but is lost (held %v)", c.id, id, held)
				}
			}
			kept := slices.DeleteFunc(slices.Clone(held), func(id int) bool { return stoppedAfter[id] })
			if !slices.Equal(kept, succeeded) {
				t.Errorf("conversation %d on %s: the session holds %v, the record says %v succeeded", c.id, n.addr, held, succeeded)
			}
		}
	}
	st.report(t)
	if st.byCode[500] > 0 {
		t.Errorf("%d requests answered 500", st.byCode[500])
	}
}

// cellID finds a cell's own id in its code.
var cellID = regexp.MustCompile(`L\.append\((\d+)\)`)

func parseIDs(s string) []int {
	var ids []int
	for _, f := range strings.Split(strings.TrimSpace(s), ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			ids = append(ids, n)
		}
	}
	return ids
}

// soakNode is one server process that the soak kills and starts again.
type soakNode struct {
	t    *testing.T
	bin  string
	env  []string
	addr string

	mu     sync.Mutex
	cmd    *exec.Cmd
	logs   *testenv.Buffer
	exited chan struct{}
	alive  bool
}

func (n *soakNode) start() {
	n.mu.Lock()
	cmd := exec.Command(n.bin, "serve")
	n.logs = &testenv.Buffer{}
	cmd.Env, cmd.Stdout, cmd.Stderr = append(slices.Clone(n.env), "SANDCHAT_ADDR="+n.addr), n.logs, n.logs
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		n.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	eventually(n.t, 2*time.Minute, "serve to listen on "+n.addr, func() bool {
		resp, err := http.Get("http://" + n.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	n.mu.Lock()
	n.alive = true
	n.mu.Unlock()
}

func (n *soakNode) up() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.alive
}

func (n *soakNode) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || !n.alive {
		return
	}
	n.alive = false
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
	if n.t.Failed() {
		n.t.Logf("serve %s output:\n%s", n.addr, n.logs.String())
	}
}

// soakConv is one conversation of the soak and the cells it was told succeeded.
type soakConv struct {
	id    int64
	next  int
	acked map[int]bool
}

type soakStats struct {
	mu                        sync.Mutex
	runs, turns, cancels      int
	transport                 int
	byStatus, byFrom          map[string]int
	byCode                    map[int]int
	warm                      []time.Duration
	cancelled, turnsCompleted int
}

func (s *soakStats) add(f func(*soakStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *soakStats) report(t *testing.T) {
	sort.Slice(s.warm, func(i, j int) bool { return s.warm[i] < s.warm[j] })
	q := func(p float64) time.Duration {
		if len(s.warm) == 0 {
			return 0
		}
		return s.warm[int(p*float64(len(s.warm)-1))]
	}
	t.Logf("soak: %d REST runs %v, interpreters from %v, HTTP %v, %d transport errors; %d turns (%d completed, %d cancelled of %d cancels asked); warm run p50 %s p99 %s (%d)",
		s.runs, s.byStatus, s.byFrom, s.byCode, s.transport, s.turns, s.turnsCompleted, s.cancelled, s.cancels,
		q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), len(s.warm))
}

var soakHTTP = &http.Client{Timeout: 3 * time.Minute}

func soakCall(method, url, token string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		rd = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := soakHTTP.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		_ = json.Unmarshal(raw, out)
	}
	return resp.StatusCode, nil
}

// run sends one REST cell; a success is acknowledged.
func (c *soakConv) run(st *soakStats, n *soakNode, token string) {
	c.next++
	id := c.next
	var r runJSON
	start := time.Now()
	code, err := soakCall("POST", fmt.Sprintf("http://%s/api/v1/conversations/%d/sandbox/executions", n.addr, c.id), token,
		map[string]any{"code": fmt.Sprintf("L = globals().setdefault('L', [])\nL.append(%d)\nlen(L)", id)}, &r)
	took := time.Since(start)
	st.add(func(s *soakStats) {
		s.runs++
		if err != nil {
			s.transport++
			return
		}
		s.byCode[code]++
		if code == 200 {
			s.byStatus[r.Status]++
			s.byFrom[r.Session.RestoredFrom]++
			if r.Session.RestoredFrom == "live" && r.Status == "success" {
				s.warm = append(s.warm, took)
			}
		}
	})
	if err == nil && code == 200 && r.Status == "success" {
		c.acked[id] = true
	}
}

// turn sends a cell through the builtin model; half of them are cancelled within
// 400 ms, while the session is often still being restored.
func (c *soakConv) turn(st *soakStats, n *soakNode, token string, rnd *rand.Rand) {
	c.next++
	id := c.next
	base := fmt.Sprintf("http://%s/api/v1/conversations/%d", n.addr, c.id)
	var started struct {
		TurnID int64 `json:"turn_id"`
	}
	msg := fmt.Sprintf("```python\nimport time\ntime.sleep(0.3)\nL = globals().setdefault('L', [])\nL.append(%d)\n```", id)
	code, err := soakCall("POST", base+"/messages", token, map[string]any{"content": msg}, &started)
	st.add(func(s *soakStats) {
		s.turns++
		if err != nil {
			s.transport++
		} else {
			s.byCode[code]++
		}
	})
	if err != nil || code != 202 {
		return
	}
	if rnd.IntN(2) == 0 {
		time.Sleep(time.Duration(rnd.IntN(400)) * time.Millisecond)
		code, err := soakCall("POST", fmt.Sprintf("%s/turns/%d/cancel", base, started.TurnID), token, nil, nil)
		st.add(func(s *soakStats) {
			s.cancels++
			if err == nil {
				s.byCode[code]++
			}
		})
	}
	end := time.Now().Add(3 * time.Minute)
	for time.Now().Before(end) {
		var tj turnJSON
		code, err := soakCall("GET", fmt.Sprintf("%s/turns/%d", base, started.TurnID), token, nil, &tj)
		if err == nil && code == 200 && tj.Status != "running" {
			st.add(func(s *soakStats) {
				switch tj.Status {
				case "completed":
					s.turnsCompleted++
				case "cancelled":
					s.cancelled++
				}
			})
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	n.t.Errorf("conversation %d: turn %d still running after 3 minutes", c.id, started.TurnID)
}
