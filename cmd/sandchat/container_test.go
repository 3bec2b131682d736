package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandchat/sandchat/migrations/testenv"
	"github.com/sandchat/sandchat/sandbox/sandboxtest"
)

// The container path for real: .ci/container (`make test-container`) builds the image
// from the Dockerfile with podman and runs TestContainer with it. The app runs as
// docker-compose.yml runs it (composeFlags: each grant of the file as podman's flag)
// and as the Kubernetes example runs it (podman kube play of a test variant of
// deploy/kubernetes/deployment.yaml, kubeVariant), against this machine's Postgres and
// Redis on 127.0.0.1 through the host's network. In both, /sys/fs/cgroup is read-only,
// as the stock runtimes mount it: the sandbox starts anyway, each session bounded
// without a cgroup of its own.

// containerMemory is docker-compose.yml's mem_limit, and the test variant's limit of the
// Kubernetes example: the engine sizes itself from it.
const containerMemory = 3 << 30

// composeFlags are docker-compose.yml's grants to the app, as podman's flags. Two cannot
// be honoured as written: `ports: 8080:8080` (the test runs on the host's network, a
// port of its own, SANDCHAT_ADDR), and `restart: unless-stopped` (a test container is
// removed at the end; podman has the same flag). `apparmor=unconfined` is passed as it
// is and means nothing on a host without AppArmor.
func composeFlags(root string) []string {
	return []string{
		"--user", "0:0", // user: "0:0"
		"--cgroupns", "private", // cgroup: private
		"--cap-drop", "ALL", // cap_drop: [ALL]
		"--cap-add", "SETUID,SETGID,KILL,CHOWN,FOWNER,DAC_OVERRIDE", // cap_add
		"--security-opt", "seccomp=" + filepath.Join(root, "deploy/docker/seccomp.json"),
		"--security-opt", "apparmor=unconfined",
		"--security-opt", "unmask=ALL", // Docker's systempaths=unconfined
		"--security-opt", "no-new-privileges", // no-new-privileges:true
		"--stop-timeout", "20", // stop_grace_period: 20s
		"--memory", strconv.Itoa(containerMemory), // mem_limit: 3g
		"--pids-limit", "4096", // pids_limit: 4096
	}
}

// podmanDir is where podman runs: its monitor (conmon) leaves files in its working
// directory, an "oom" for a container that met its memory limit.
var podmanDir = os.TempDir()

// podman runs podman in podmanDir.
func podman(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("podman", args...)
	cmd.Dir = podmanDir
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("podman %s: %v: %s%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String(), err
}

func runtimeFlags() []string { return strings.Fields(os.Getenv("SANDCHAT_PODMAN_FLAGS")) }

// appEnv is what the app is told: the test's own schema and Redis prefix, its port,
// and no package CDN (this machine reaches none).
func appEnv(t *testing.T, port int) map[string]string {
	_, prefix := testenv.Redis(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	return map[string]string{
		"SANDCHAT_DATABASE_URL":        testenv.DatabaseURL(t),
		"SANDCHAT_REDIS_URL":           testenv.RedisURL(),
		"SANDCHAT_REDIS_PREFIX":        prefix,
		"SANDCHAT_ADDR":                addr,
		"SANDCHAT_PUBLIC_URL":          "http://" + addr,
		"SANDCHAT_ALLOWED_ORIGINS":     "http://" + addr,
		"SANDCHAT_SANDBOX_PACKAGE_CDN": "off",
		"SANDCHAT_SANDBOX_GRACE":       "1s",
	}
}

// app is one running app container.
type app struct {
	t    *testing.T
	name string // the container's
	base string
	pid  string // the server's pid on the host, when it started
}

func (a *app) exec(args ...string) (string, error) {
	return podman(a.t, append([]string{"exec", a.name}, args...)...)
}

// serverPID names the server's process as the host sees it: the container's init
// (tini), its child (sandchat serve), the container's state and restarts.
func (a *app) serverPID() string {
	out, _ := podman(a.t, "inspect", "--format", "{{.State.Pid}} {{.State.Status}} {{.RestartCount}}", a.name)
	f := strings.Fields(out)
	if len(f) == 0 {
		return ""
	}
	// tini's first child; orphans it reaps come and go after it.
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%s/task/%s/children", f[0], f[0]))
	server, _, _ := strings.Cut(strings.TrimSpace(string(children)), " ")
	return strings.TrimSpace(out) + " server " + server
}

// ready waits for the server and its sandbox, and returns an admin's client.
func (a *app) ready() *client {
	t := a.t
	testenv.Eventually(t, 3*time.Minute, "the app to answer /healthz", func() bool {
		resp, err := http.Get(a.base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	tok, err := a.exec("sandchat", "user", "create", "--name", "admin", "--admin")
	if err != nil {
		t.Fatal(err)
	}
	admin := &client{t: t, base: a.base, token: strings.TrimSpace(tok)}
	var st struct {
		Available bool
		Reason    string
	}
	testenv.Eventually(t, 5*time.Minute, "the sandbox to be available", func() bool {
		admin.must(200, "GET", "/api/v1/sandbox/status", nil, &st)
		return st.Available
	})
	a.pid = a.serverPID()
	return admin
}

func (a *app) logs() string {
	out, _ := podman(a.t, "logs", "--tail", "60", a.name)
	return out
}

func TestContainer(t *testing.T) {
	image := os.Getenv("SANDCHAT_CONTAINER_IMAGE")
	if image == "" {
		t.Skip("the container test runs under `make test-container` (.ci/container), which builds the image first")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	podmanDir = t.TempDir()
	t.Run("compose", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		a := &app{t: t, name: testenv.Name("sandchat-compose-"), base: fmt.Sprintf("http://127.0.0.1:%d", port)}
		args := append([]string{"run", "-d", "--name", a.name, "--network", "host"}, runtimeFlags()...)
		args = append(args, composeFlags(root)...)
		for k, v := range appEnv(t, port) {
			args = append(args, "-e", k+"="+v)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("app logs:\n%s", a.logs())
			}
			_, _ = podman(t, "rm", "-f", "-t", "2", a.name)
		})
		if _, err := podman(t, append(args, image)...); err != nil {
			t.Fatal(err)
		}
		admin := a.ready()
		checkApp(t, a, admin, "✓ session", "bounded by rlimits", "! processes    RLIMIT_NPROC 128",
			"! memory       the wasm heap's maximum", "oom_score_adj 1000", "! cpu          the run's time limit; nice 10",
			"read-only file system", "6 session processes (one per 512 MiB of memory)", "memory 3.0 GiB from cgroup")
		t.Run("healthcheck", func(t *testing.T) {
			if _, err := podman(t, "healthcheck", "run", a.name); err != nil {
				t.Fatalf("the image's HEALTHCHECK: %v", err)
			}
		})
		attacks(t, a, admin)
	})
	t.Run("kube play", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		dir := t.TempDir()
		env := appEnv(t, port)
		env["SANDCHAT_SANDBOX_ISOLATION"] = "process" // see kubeVariant
		manifest, err := kubeVariant(root, image, env)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "sandchat.yaml")
		if err := os.WriteFile(file, manifest, 0o644); err != nil {
			t.Fatal(err)
		}
		// The example's seccompProfile names Localhost sandchat.json, which a node keeps in
		// its kubelet directory: here, a directory of the test's own.
		profiles := filepath.Join(dir, "seccomp")
		if err := os.MkdirAll(profiles, 0o755); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(root, "deploy/docker/seccomp.json"))
		if err := os.WriteFile(filepath.Join(profiles, "sandchat.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		// kube play takes no --ulimit: podman's defaults (the largest), which this host's
		// limits refuse, are set in a containers.conf of the test's own.
		conf := filepath.Join(dir, "containers.conf")
		var ulimits []string
		f := runtimeFlags()
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "--ulimit" {
				ulimits = append(ulimits, fmt.Sprintf("%q", f[i+1]))
			}
		}
		if err := os.WriteFile(conf, []byte("[containers]\ndefault_ulimits = ["+strings.Join(ulimits, ", ")+"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		a := &app{t: t, name: kubePod + "-pod-0-sandchat", base: fmt.Sprintf("http://127.0.0.1:%d", port)}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("app logs:\n%s", a.logs())
			}
			_, _ = podman(t, "kube", "down", file)
		})
		play := exec.Command("podman", append(append([]string{"kube", "play"}, kubeRuntimeFlags()...), "--seccomp-profile-root", profiles, file)...)
		play.Env, play.Dir = append(os.Environ(), "CONTAINERS_CONF="+conf), podmanDir
		if out, err := play.CombinedOutput(); err != nil {
			t.Fatalf("podman kube play: %v: %s", err, out)
		}
		admin := a.ready()
		checkApp(t, a, admin, "process per session, Deno permissions only", "bounded by rlimits", "! processes    RLIMIT_NPROC 128",
			"oom_score_adj 1000", "6 session processes (one per 512 MiB of memory)", "memory 3.0 GiB from cgroup")
	})
}

// kubePod is the Deployment's name in the test variant: podman names its pod after it.
var kubePod = testenv.Name("sandchat-kube-")

// kubeRuntimeFlags are the flags of .ci/container's runtime that kube play takes.
func kubeRuntimeFlags() []string {
	var out []string
	f := runtimeFlags()
	for i := 0; i < len(f); i++ {
		if f[i] == "--ulimit" && i+1 < len(f) {
			i++ // kube play takes no ulimit: the pod inherits the service's
			continue
		}
		out = append(out, f[i])
	}
	return out
}

// kubeVariant is deploy/kubernetes/deployment.yaml as this machine's podman (4.3) can
// play it, each change one replacement of a line of the example (a line that is not
// found fails the test, so the variant follows the example):
//   - one replica named for the test, the image just built;
//   - the Secret's values (external services) as plain values: this machine's
//     Postgres and Redis, with the test's schema and prefix;
//   - the host's network (no bridge here) and a port of the test's own, by number in
//     the probes: podman maps a container's ports only on a bridge;
//   - no hostUsers: false: podman makes such a pod's user namespace from /etc/subuid
//     ranges of its "containers" user, which these machines do not have;
//   - a memory limit of 3 GiB (the example's 8 GiB is more than this machine gives);
//   - SANDCHAT_SANDBOX_ISOLATION=process (kubeEnv): podman 4.3 does not honour
//     procMount: Unmasked, and under the masked /proc of a container the kernel lets
//     bubblewrap mount no /proc for a session. The compose run holds bubblewrap under the
//     same grants.
//
// Everything else — the securityContext's user, capabilities, seccomp profile and
// read-only root, the probes, the two emptyDir volumes, the package cache's settings —
// is the example's.
func kubeVariant(root, image string, env map[string]string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/deployment.yaml"))
	if err != nil {
		return nil, err
	}
	s := string(b)
	port := env["SANDCHAT_ADDR"][strings.LastIndexByte(env["SANDCHAT_ADDR"], ':')+1:]
	var envYAML strings.Builder
	for k, v := range env {
		q, _ := json.Marshal(v)
		fmt.Fprintf(&envYAML, "            - { name: %s, value: %s }\n", k, q)
	}
	for _, r := range [][2]string{
		{"  name: sandchat\n", "  name: " + kubePod + "\n"},
		{"  replicas: 2\n", "  replicas: 1\n"},
		{"      hostUsers: false\n", "      hostNetwork: true\n"},
		{"          image: sandchat:latest # build it with the repository's Dockerfile\n", "          image: " + image + "\n"},
		{"            - name: SANDCHAT_DATABASE_URL\n              valueFrom: { secretKeyRef: { name: sandchat, key: database-url } }\n", envYAML.String()},
		{"            - name: SANDCHAT_REDIS_URL\n              valueFrom: { secretKeyRef: { name: sandchat, key: redis-url } }\n", ""},
		{"            - name: SANDCHAT_LLM_API_KEY\n              valueFrom: { secretKeyRef: { name: sandchat, key: llm-api-key, optional: true } }\n", ""},
		{"            - name: SANDCHAT_PUBLIC_URL\n              value: https://chat.example.com\n", ""},
		{"          ports:\n            - name: http\n              containerPort: 8080\n", ""},
		{"httpGet: { path: /healthz, port: http }", "httpGet: { path: /healthz, port: " + port + " }"},
		{"httpGet: { path: /healthz, port: http }", "httpGet: { path: /healthz, port: " + port + " }"},
		{"httpGet: { path: /readyz, port: http }", "httpGet: { path: /readyz, port: " + port + " }"},
		{"            limits: { memory: 8Gi }\n", "            limits: { memory: 3Gi }\n"},
	} {
		if !strings.Contains(s, r[0]) {
			return nil, fmt.Errorf("deploy/kubernetes/deployment.yaml has no line %q: update kubeVariant with the example", r[0])
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return []byte(s), nil
}

// checkApp: doctor inside the container passes and says what says (how sessions are
// bounded, the capacity); a run answers 42; a toast arrives over the WebSocket.
func checkApp(t *testing.T, a *app, admin *client, says ...string) {
	t.Run("doctor", func(t *testing.T) {
		out, err := a.exec("sandchat", "doctor")
		if err != nil {
			t.Fatalf("doctor inside the container: %v", err)
		}
		t.Logf("doctor:\n%s", out)
		for _, want := range append([]string{"✓ run", "✓ capacity"}, says...) {
			if !strings.Contains(out, want) {
				t.Errorf("doctor does not say %q", want)
			}
		}
	})
	t.Run("a run answers 42", func(t *testing.T) {
		agent := admin.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
		conv := admin.createConversation(agent.ID)
		if r := admin.run(conv, "6 * 7"); r.Status != "success" || r.Result == nil || *r.Result != "42" {
			t.Fatalf("run: %+v", r)
		}
	})
	t.Run("a toast arrives", func(t *testing.T) {
		agent := admin.createAgent(map[string]any{"name": "Toaster", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
		conv := admin.createConversation(agent.ID)
		tab := admin.socket()
		admin.must(200, "PUT", fmt.Sprintf("/api/v1/conversations/%d/internal-tools/pyodide_sandbox", conv), map[string]any{"enabled": false}, nil)
		var d struct{ Level, Message string }
		_ = json.Unmarshal(tab.expect("toast").Data, &d)
		if d.Level != "success" || d.Message == "" {
			t.Fatalf("toast %+v", d)
		}
	})
}

// attacks, in the container with its memory and pids limits and no cgroup per session:
// a 2 GiB allocation is refused and the session lives on; Python's forks and a thread
// bomb through JavaScript stay bounded; a busy loop is stopped at its time limit while
// another session answers; memory outside the interpreter's heap past the container's
// limit costs the session, never the server.
func attacks(t *testing.T, a *app, admin *client) {
	agent := admin.createAgent(map[string]any{"name": "Attacker", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	conv := func() int64 { return admin.createConversation(agent.ID) }
	neighbour := conv()
	answers := func(t *testing.T) {
		t.Helper()
		if r := admin.run(neighbour, "6 * 7"); r.Status != "success" || r.Result == nil || *r.Result != "42" {
			t.Errorf("another session: %+v", r)
		}
	}
	serverAlive := func(t *testing.T) {
		t.Helper()
		if got := a.serverPID(); got != a.pid {
			t.Fatalf("the server is not the one it was: %q, was %q", got, a.pid)
		}
		resp, err := http.Get(a.base + "/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("/healthz: %v", err)
		}
		resp.Body.Close()
	}
	// during runs code in one session and, meanwhile, asks another session for 42.
	during := func(t *testing.T, c int64, code string, timeout int) runJSON {
		t.Helper()
		var r runJSON
		var wg sync.WaitGroup
		wg.Go(func() {
			admin.do("POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", c), map[string]any{"code": code, "timeout_ms": timeout}, &r)
		})
		time.Sleep(500 * time.Millisecond) // let the attack start; the neighbour's answer is what is checked
		answers(t)
		wg.Wait()
		return r
	}

	t.Run("a 2 GiB allocation is a MemoryError", func(t *testing.T) {
		c := conv()
		admin.run(c, "keep = 'still here'")
		r := admin.run(c, "try:\n    b = bytearray(2 * 1024**3 - 1)\n    r = len(b)\nexcept MemoryError:\n    r = 'MemoryError'\nr")
		if r.Result == nil || *r.Result != "'MemoryError'" {
			t.Fatalf("%+v", r)
		}
		if r := admin.run(c, "keep"); r.Result == nil || *r.Result != "'still here'" || r.Session.RestoredFrom != "live" {
			t.Fatalf("after the MemoryError: %+v", r)
		}
		serverAlive(t)
	})
	t.Run("forks and a thread bomb stay bounded", func(t *testing.T) {
		c := conv()
		r := during(t, c, sandboxtest.Bomb, 60000)
		t.Logf("the bomb: %s %v %+v", r.Status, ptrText(r.Result), r.Error)
		if r.Status == "success" && !strings.HasPrefix(ptrText(r.Result), "['OSError', 'OSError'") {
			t.Errorf("Python's fork or subprocess ran: %s", ptrText(r.Result))
		}
		if r.Status == "success" && strings.HasSuffix(ptrText(r.Result), "'5000']") {
			t.Errorf("5000 workers were made: nothing bounded the session")
		}
		serverAlive(t)
		answers(t)
	})
	t.Run("a busy loop is stopped at its time limit", func(t *testing.T) {
		c := conv()
		r := during(t, c, sandboxtest.Stubborn, 3000)
		if r.Status != "timeout" {
			t.Fatalf("%+v", r)
		}
		serverAlive(t)
	})
	t.Run("sessions together past the container's limit: the kernel kills a session, not the server", func(t *testing.T) {
		// Five sessions each hold 640 MiB of JavaScript buffers, under a session's cap
		// (896 MiB, the engine's watch) but 3.1 GiB together in a 3 GiB container: the
		// kernel's OOM killer must choose, and oom_score_adj 1000 makes it a session.
		var wg sync.WaitGroup
		results := make([]runJSON, 5)
		for i := range results {
			c := conv()
			wg.Go(func() {
				admin.do("POST", fmt.Sprintf("/api/v1/conversations/%d/sandbox/executions", c), map[string]any{"timeout_ms": 120000, "code": `import js, asyncio
await js.eval("""(async () => {
  globalThis.hoard = [];
  for (let i = 0; i < 10; i++) { hoard.push(new Uint8Array(64 * 2**20).fill(1)); await new Promise((r) => setTimeout(r, 20)); }
})()""")
await asyncio.sleep(10)
'held'`}, &results[i])
			})
		}
		wg.Wait()
		stopped, told := 0, 0
		for i, r := range results {
			t.Logf("session %d: %s %v %+v", i, r.Status, ptrText(r.Result), r.Error)
			if r.Status != "success" {
				stopped++
			}
			if r.Error != nil && strings.Contains(r.Error.Message, "the server ran out of memory") {
				told++
			}
		}
		if stopped == 0 || told == 0 {
			t.Errorf("five sessions held 3.1 GiB in a 3 GiB container: %d stopped, %d told why", stopped, told)
		}
		serverAlive(t)
		answers(t)
	})
	t.Run("memory past the container's limit costs the session, not the server", func(t *testing.T) {
		c := conv()
		// ArrayBuffers live outside the interpreter's heap and V8's: only the engine's
		// watch and, past the container's limit, the kernel's OOM killer stop them.
		r := during(t, c, `import js
await js.eval("""(async () => {
  globalThis.hoard = [];
  for (let i = 0; i < 64; i++) { hoard.push(new Uint8Array(64 * 2**20).fill(1)); await new Promise((r) => setTimeout(r, 1)); }
  return hoard.length;
})()""")`, 120000)
		t.Logf("the hoard: %s %v %+v", r.Status, ptrText(r.Result), r.Error)
		if r.Status == "success" {
			t.Fatalf("4 GiB held in a 3 GiB container: %v", ptrText(r.Result))
		}
		serverAlive(t)
		answers(t)
	})
}

func ptrText(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
