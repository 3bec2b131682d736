package main

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
)

// loopbackListeners counts what reaches a UDP and a TCP port on loopback, as a STUN and
// a TURN server would see it.
type loopbackListeners struct {
	udp, tcp         net.Addr
	datagrams, conns atomic.Int64
}

func listenLoopback(t *testing.T) *loopbackListeners {
	t.Helper()
	l := &loopbackListeners{}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close(); ln.Close() })
	l.udp, l.tcp = pc.LocalAddr(), ln.Addr()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			l.datagrams.Add(1)
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.conns.Add(1)
			c.Close()
		}
	}()
	return l
}

// iceServers is the JS configuration of an RTCPeerConnection that asks l for STUN over
// UDP and TURN over TCP.
func (l *loopbackListeners) iceServers() string {
	return fmt.Sprintf(`{iceServers: [{urls: "stun:%s"}, {urls: "turn:%s?transport=tcp", username: "u", credential: "p"}]}`, l.udp, l.tcp)
}

// turnOverTCP is the JS configuration of an RTCPeerConnection that may only relay,
// through TURN over TCP at l: no STUN datagram, only the TCP connection.
func (l *loopbackListeners) turnOverTCP() string {
	return fmt.Sprintf(`{iceServers: [{urls: "turn:%s?transport=tcp", username: "u", credential: "p"}], iceTransportPolicy: "relay"}`, l.tcp)
}

// webrtcProbe is a display that tries every way to WebRTC from its frame it knows, and
// reports each: the constructors, their webkit alias, TURN over TCP alone (relay only),
// a fresh window in a nested about:blank or srcdoc frame (made by script, by markup,
// inside closed shadow roots declared or attached, and through innerHTML), a worker.
// A nested frame's own script reports to the page if it ever runs. It also tries every
// way to make Chromium connect that no policy covers: <link rel=preconnect> in its
// markup and inserted by script through each DOM path (append, innerHTML,
// insertAdjacentHTML, outerHTML, a shadow root, a range's fragment, a template's clone,
// a parsed document's node), a meta refresh (markup and script), a link's click and
// window.open, each of which opens a connection to its host before anything refuses
// it. (The item's code only ever runs after the frame's guard: the frame writes it in
// after its own script has run.)
const webrtcProbe = `import json
from IPython.display import HTML
ice = 'ICE_SERVERS'
nested = "<script>try { const pc = new RTCPeerConnection(" + ice + "); pc.createDataChannel('x'); pc.createOffer().then((o) => pc.setLocalDescription(o)); parent.parent.postMessage({type: 'rtc', vector: 'nested srcdoc ran'}, '*'); } catch (e) { parent.parent.postMessage({type: 'rtc', vector: 'nested srcdoc refused'}, '*'); }</script>"
page = """<link rel="preconnect" href="http://TCP_ADDR/"><meta http-equiv="refresh" content="1; url=http://TCP_ADDR/meta">
<div id="host"></div>
<iframe srcdoc="NESTED_ATTR"></iframe>
<div><template shadowrootmode="closed"><iframe srcdoc="NESTED_ATTR"></iframe></template></div>
<script>
const r = { type: "rtc-probe" };
const offer = (PC) => { const pc = new PC(ICE_JS); pc.createDataChannel("x"); return pc.createOffer().then((o) => pc.setLocalDescription(o)); };
const attempt = (name, fn) => { try { fn(); r[name] = "reached"; } catch (e) { r[name] = "refused: " + e.name; } };
attempt("constructor", () => offer(RTCPeerConnection));
attempt("TURN over TCP only", () => { const pc = new RTCPeerConnection(TURN_TCP); pc.createDataChannel("x"); pc.createOffer().then((o) => pc.setLocalDescription(o)); });
attempt("worker", () => { new Worker(URL.createObjectURL(new Blob(["try { new RTCPeerConnection() } catch (e) {} fetch('http://TCP_ADDR/w').catch(() => {})"], { type: "text/javascript" }))); });
const hint = '<link rel="preconnect" href="http://TCP_ADDR/">';
attempt("preconnect by append", () => { const l = document.createElement("link"); l.rel = "preconnect"; l.href = "http://TCP_ADDR/"; document.head.append(l); });
attempt("preconnect by appendChild", () => { const l = document.createElement("link"); l.rel = "preconnect"; l.href = "http://TCP_ADDR/"; document.head.appendChild(l); });
attempt("preconnect by innerHTML", () => { const d = document.createElement("div"); document.body.append(d); d.innerHTML = hint; });
attempt("preconnect by insertAdjacentHTML", () => { document.body.insertAdjacentHTML("beforeend", hint); });
attempt("preconnect by outerHTML", () => { const d = document.createElement("div"); document.body.append(d); d.outerHTML = hint; });
attempt("preconnect in a shadow root", () => { const d = document.createElement("div"); document.body.append(d); d.attachShadow({ mode: "open" }).innerHTML = hint; });
attempt("preconnect by a range", () => { document.body.append(document.createRange().createContextualFragment(hint)); });
attempt("preconnect from a template", () => { const t = document.createElement("template"); t.innerHTML = hint; document.body.append(t.content.cloneNode(true)); });
attempt("preconnect from a parsed document", () => { const d = new DOMParser().parseFromString(hint, "text/html"); document.head.append(document.adoptNode(d.head.firstChild)); });
attempt("meta refresh by script", () => { const m = document.createElement("meta"); m.httpEquiv = "refresh"; m.content = "0; url=http://TCP_ADDR/refresh"; document.head.append(m); });
attempt("a link's click", () => { const a = document.createElement("a"); a.href = "http://TCP_ADDR/click"; document.body.append(a); a.click(); });
attempt("window.open", () => { window.open("http://TCP_ADDR/open", "_self"); });
attempt("webkit", () => offer(webkitRTCPeerConnection));
attempt("descriptor", () => offer(Object.getOwnPropertyDescriptor(window, "RTCPeerConnection").value));
attempt("about:blank frame", () => { const f = document.createElement("iframe"); document.body.append(f); offer(f.contentWindow.RTCPeerConnection); });
attempt("srcdoc frame", () => { const f = document.createElement("iframe"); f.srcdoc = NESTED_JS; document.body.append(f); });
attempt("srcdoc in an attached shadow root", () => { const s = document.getElementById("host").attachShadow({ mode: "closed" }); const f = document.createElement("iframe"); f.srcdoc = NESTED_JS; s.append(f); });
attempt("srcdoc through innerHTML", () => { const d = document.createElement("div"); d.innerHTML = '<iframe srcdoc="' + NESTED_JS.replace(/"/g, "&quot;") + '"></iframe>'; document.body.append(d); });
attempt("document.write", () => { document.write('<template shadowrootmode="closed"><iframe srcdoc="x"></iframe></template>'); });
parent.postMessage(r, "*");
</script>"""
page = page.replace("NESTED_ATTR", nested.replace("&", "&amp;").replace('"', "&quot;")).replace("NESTED_JS", json.dumps(nested).replace("</", "<\\/")).replace("ICE_JS", ice).replace("TURN_TCP", 'TURN_ONLY').replace("TCP_ADDR", 'TURN_ADDR')
display(HTML(page))
`

// TestBrowserDisplayFramesHaveNoWebRTC: a display frame's script gets no network through
// WebRTC, whichever way it takes to it, nor through the resource hints and navigations
// Chromium connects for before any policy refuses them: nothing reaches a STUN (UDP) or
// TURN (TCP) server on loopback, while the same request from the page itself does, so
// the listeners would have seen it.
func TestBrowserDisplayFramesHaveNoWebRTC(t *testing.T) {
	frame, page := listenLoopback(t), listenLoopback(t)
	tb, _, _, _ := browserConversation(t)
	code := strings.NewReplacer("ICE_SERVERS", frame.iceServers(), "TURN_ONLY", frame.turnOverTCP(), "TURN_ADDR", frame.tcp.String()).Replace(webrtcProbe)
	cell := `[...document.querySelectorAll("#messages .cell")].find((c) => c.querySelector("iframe.display-frame"))`
	var probe map[string]string
	tb.run(t, "run the probe",
		chromedp.Evaluate(`window.rtc = []; addEventListener("message", (e) => { if (e.data?.type === "rtc-probe" || e.data?.type === "rtc") window.rtc.push(e.data) }); true`, nil),
		say(py(code)), until(cell+`?.dataset.done`),
		until(`window.rtc.some((m) => m.type === "rtc-probe")`),
		chromedp.Evaluate(`window.rtc.find((m) => m.type === "rtc-probe")`, &probe),
	)
	t.Logf("the frame's attempts: %v", probe)
	for _, k := range []string{"constructor", "webkit", "descriptor", "TURN over TCP only", "about:blank frame", "document.write", "window.open"} {
		if !strings.HasPrefix(probe[k], "refused") {
			t.Errorf("%s: %q, want it refused", k, probe[k])
		}
	}
	// The page's own connection, started after the frame's attempts, reaches its
	// listeners: by then anything the frame started would have reached the frame's.
	tb.run(t, "the page's own WebRTC reaches its listeners",
		chromedp.Evaluate(`(() => { const pc = new RTCPeerConnection(`+page.iceServers()+`); pc.createDataChannel("x"); pc.createOffer().then((o) => pc.setLocalDescription(o)); window.control = pc; return true })()`, nil))
	eventually(t, 30e9, "the control's STUN datagram and TURN connection", func() bool { return page.datagrams.Load() > 0 && page.conns.Load() > 0 })
	var nested []map[string]string
	tb.run(t, "nested frames", chromedp.Evaluate(`window.rtc.filter((m) => m.type === "rtc")`, &nested))
	if len(nested) != 0 {
		t.Errorf("a nested frame's script ran: %v", nested)
	}
	if d, c := frame.datagrams.Load(), frame.conns.Load(); d != 0 || c != 0 {
		t.Fatalf("the display frame reached the network: %d datagrams, %d TCP connections", d, c)
	}
}
