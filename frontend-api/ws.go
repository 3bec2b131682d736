package frontendapi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/gofiber/contrib/websocket"
	"github.com/gofiber/fiber/v2"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
)

// WSConfig bounds what one socket may cost.
type WSConfig struct {
	// QueueBytes is how much may wait to be written to one client, in the queue or unsent
	// in the kernel; past it the client is too slow and is disconnected, so it never holds
	// back the others.
	QueueBytes       int
	WriteTimeout     time.Duration
	PingInterval     time.Duration
	PongWait         time.Duration
	ReadLimit        int64
	MaxSubscriptions int
	// ReplayPage is how many events one query of a replay reads.
	ReplayPage int
	// SlowLinger bounds how long a socket dropped as too slow is still held, its close
	// frame behind what the client has not read yet, for a client that reads again to
	// read its way to it; then the connection is reset.
	SlowLinger time.Duration
	// CredentialCheck is how often a socket checks again that the token or session that
	// opened it still signs its user in. A revocation closes the socket at once through
	// Redis; this bounds how long one whose message was lost stays open.
	CredentialCheck time.Duration
}

func (c WSConfig) withDefaults() WSConfig {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.QueueBytes, 4<<20)
	def(&c.MaxSubscriptions, 100)
	def(&c.ReplayPage, 500)
	defDur(&c.WriteTimeout, 10*time.Second)
	defDur(&c.PingInterval, 25*time.Second)
	defDur(&c.PongWait, 60*time.Second)
	defDur(&c.SlowLinger, 5*time.Second)
	defDur(&c.CredentialCheck, time.Minute)
	if c.ReadLimit <= 0 {
		c.ReadLimit = 64 << 10
	}
	return c
}

// Close codes: 1012 asks the client to reconnect (a deploy); 1013 says it fell behind.
const (
	closeRestart = websocket.CloseServiceRestart
	closeSlow    = websocket.CloseTryAgainLater
)

// closeGrace is how long a closing socket still reads, waiting for the client's close.
const closeGrace = time.Second

const (
	opFrame       = iota // a server frame, written as is
	opEvent              // a conversation or user event from the bus
	opSubscribe          // start delivering a conversation, replaying after since
	opUnsubscribe        // stop delivering a conversation
	opResync             // replay what may have been missed (the bus reconnected)
	opRevoke             // the user lost access to a conversation
)

// EventAccessRevoked goes to a user's channel when they are removed from a
// conversation: every socket of theirs drops its subscription to it.
const EventAccessRevoked = "access.revoked"

type outItem struct {
	op      int
	conv    int64
	seq     int64
	since   *int64
	payload []byte
}

// client is one socket: the reader runs in the handler's goroutine, the writer in its
// own, and everything the writer sends goes through queue.
type client struct {
	hub  *Hub
	conn *websocket.Conn
	user *sandchat.User
	// session is the browser session that opened the socket (0: an API token); its
	// sign-out closes the socket.
	session int64
	// token is the API token that opened the socket (0: a browser session); revoking it
	// closes the socket, and so does expires, when the credential stops working.
	token   int64
	expires time.Time
	// verify checks again that the credential that opened the socket signs its user in
	// (nil: nothing to check); an EUNAUTHORIZED from it closes the socket (recheck).
	verify func(ctx context.Context) error
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	queue  []outItem
	queued int
	// unsent is what the kernel had not yet sent to the client when last asked: with
	// queued, how far the client is behind.
	unsent    int
	closeCode int
	closeMsg  string
	// lingerUntil is when a socket closing for slowness stops waiting for its client
	// to take the close frame (tooSlowLocked sets it).
	lingerUntil time.Time
	// writing is when the write in progress began (zero: none): one that takes the
	// write timeout is a client too slow.
	writing time.Time
	// closeSent: the close frame went out (the writer, for a socket dropped as slow).
	closeSent bool
	wake      chan struct{}

	// channels are the pub/sub channels this socket joined (under chMu: the reader
	// adds and removes them, the writer drops one on revocation).
	chMu     sync.Mutex
	channels []string
	// Touched only by the writer: per conversation, whether events flow and the last
	// seq written.
	convs map[int64]*convState
}

type convState struct {
	active bool
	last   int64
}

func (cl *client) enqueue(it outItem) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.closeCode != 0 {
		return
	}
	over := func() bool { return cl.queued+cl.unsent+len(it.payload) > cl.hub.cfg.QueueBytes }
	if over() && cl.conn != nil {
		cl.unsent = unsent(cl.conn.NetConn()) // the writer's figure may be stale
	}
	if over() {
		cl.tooSlowLocked()
		return
	}
	cl.queue = append(cl.queue, it)
	cl.queued += len(it.payload)
	select {
	case cl.wake <- struct{}{}:
	default:
	}
}

// tooSlowLocked drops the socket for slowness, once, and counts it, whichever way the
// slowness showed (the queue bound, a write left blocked, writes not taken, pings not
// answered); cl.mu is held. The hub lets go of the socket at once: its reader stops.
// The client gets SlowLinger to take what the kernel holds for it: a write in progress
// may finish within it (a frame is never cut while the client reads), and the close
// frame, 1013, goes after it (the writer, then linger).
func (cl *client) tooSlowLocked() {
	if cl.closeCode != 0 {
		return
	}
	cl.closeCode, cl.closeMsg = closeSlow, "client too slow, reconnect with since"
	cl.lingerUntil = time.Now().Add(cl.hub.cfg.SlowLinger)
	cl.hub.metrics.slowClosed.Inc()
	cl.cancel()
	if cl.conn != nil {
		_ = cl.conn.NetConn().SetReadDeadline(time.Now())
		_ = cl.conn.NetConn().SetWriteDeadline(cl.lingerUntil)
	}
}

// wrote records what the kernel holds for the client after a write, and closes the
// socket when that and the queue together pass the bound.
func (cl *client) wrote() {
	n := unsent(cl.conn.NetConn())
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.unsent = n
	if cl.queued+n > cl.hub.cfg.QueueBytes {
		cl.tooSlowLocked()
	}
}

// writeFailed ends the socket after a failed write; one that ran out of time failed
// because the client stopped reading (the write's own deadline, which only a write the
// watch did not see in time reaches).
func (cl *client) writeFailed(err error) {
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		cl.mu.Lock()
		cl.tooSlowLocked()
		cl.mu.Unlock()
	}
	cl.cancel()
}

// extendRead moves the read deadline PongWait ahead while the socket is open. Once it
// is closing, the closing deadline stands, however much the client still sends.
func (cl *client) extendRead() error {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.ctx.Err() != nil {
		return nil
	}
	return cl.conn.SetReadDeadline(time.Now().Add(cl.hub.cfg.PongWait))
}

func (cl *client) shutdown(code int, msg string) {
	cl.mu.Lock()
	if cl.closeCode == 0 {
		cl.closeCode, cl.closeMsg = code, msg
	}
	cl.mu.Unlock()
	cl.cancel()
}

// recheck closes the socket, as a revocation's message would, when the credential that
// opened it no longer signs its user in: that message goes through Redis, and one lost
// (Redis away when it was sent, the sender on another prefix, a revocation committed
// between the socket's sign-in and its joining the user's channel) would leave the
// socket delivering the conversations to whoever holds it. A check that cannot be made
// (Postgres away) keeps the socket: it reports false only when the socket closes.
func (cl *client) recheck() bool {
	if cl.verify == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(cl.ctx, 10*time.Second)
	defer cancel()
	err := cl.verify(ctx)
	if sandchat.ErrorCode(err) != sandchat.EUNAUTHORIZED {
		return true
	}
	reason := sandchat.ErrorMessage(err)
	if len(reason) > maxCloseReason {
		reason = reason[:maxCloseReason]
	}
	cl.shutdown(closeSignedOut, reason)
	return false
}

// maxCloseReason is the most a close frame's text may hold, in bytes.
const maxCloseReason = 123

// signedInBy reports whether a revocation of the user's credentials (a token, a browser
// session, or all of them when both are 0) covers this socket.
func (cl *client) signedInBy(tokenID, sessionID int64) bool {
	switch {
	case tokenID != 0:
		return cl.token == tokenID
	case sessionID != 0:
		return cl.session == sessionID
	}
	return true
}

func (cl *client) frame(typ string, conv int64, data any) {
	raw, _ := json.Marshal(data)
	payload, _ := json.Marshal(conversations.Event{Type: typ, ConversationID: conv, Data: raw})
	cl.enqueue(outItem{op: opFrame, payload: payload})
}

func (cl *client) errorFrame(conv int64, err error) {
	cl.frame("error", conv, map[string]string{"code": sandchat.ErrorCode(err), "message": sandchat.ErrorMessage(err)})
}

// websocket returns the /api/v1/ws handler. The user's channel is joined before the
// upgrade completes, so a client whose dial returned already receives its toasts.
func (s *Server) websocket() fiber.Handler {
	upgrade := websocket.New(func(conn *websocket.Conn) {
		cl := conn.Locals("client").(*client)
		cl.mu.Lock()
		cl.conn = conn
		cl.mu.Unlock()
		cl.run()
	}, websocket.Config{Origins: []string{"*"}, ReadBufferSize: 4096, WriteBufferSize: 4096})
	return func(c *fiber.Ctx) error {
		if !websocket.IsWebSocketUpgrade(c) {
			return fiber.NewError(fiber.StatusUpgradeRequired, "This endpoint speaks WebSocket only.")
		}
		if origin := c.Get(fiber.HeaderOrigin); origin != "" && !slices.Contains(s.cfg.AllowedOrigins, origin) {
			return sandchat.Errorf(sandchat.EFORBIDDEN, "Origin %q is not allowed (SANDCHAT_ALLOWED_ORIGINS).", origin)
		}
		h := s.hub
		user := sandchat.UserFromContext(c.UserContext())
		// The socket outlives the upgrade's request, and keeps its id for its logs.
		ctx, cancel := context.WithCancel(sandchat.WithUser(context.WithoutCancel(c.UserContext()), user))
		cred, _ := c.Locals(localCredential).(sandchat.Credential)
		cl := &client{hub: h, user: user, expires: cred.ExpiresAt,
			ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), convs: map[int64]*convState{}}
		switch cred.Kind {
		case sandchat.CredentialSession:
			cl.session = cred.ID
		case sandchat.CredentialToken:
			cl.token = cred.ID
		}
		if cred.Kind != "" {
			cl.verify = func(ctx context.Context) error {
				u, _, err := s.checkCredential(ctx, cred)
				if err == nil && u.ID != user.ID {
					err = sandchat.Errorf(sandchat.EUNAUTHORIZED, "This sign-in is no longer this user's.")
				}
				return err
			}
		}
		jctx, jcancel := context.WithTimeout(ctx, 10*time.Second)
		defer jcancel()
		if err := h.join(jctx, cl, h.bus.UserChannel(user.ID), 0); err != nil {
			cancel()
			// Joining fails only when Redis does not confirm the subscription.
			return errors.Join(sandchat.Unavailable(sandchat.DepRedis, err), err)
		}
		// A revocation committed since the request was signed in was published before
		// the socket could hear it: check once more, now that it does.
		if cl.verify != nil {
			if err := cl.verify(jctx); err != nil {
				h.leave(cl, h.bus.UserChannel(user.ID))
				cancel()
				return err
			}
		}
		cl.channels = append(cl.channels, h.bus.UserChannel(user.ID))
		c.Locals("client", cl)
		if err := upgrade(c); err != nil {
			h.leave(cl, h.bus.UserChannel(user.ID))
			cancel()
			return err
		}
		return nil
	}
}

func (cl *client) run() {
	h := cl.hub
	h.add(cl)
	h.metrics.clients.Inc()
	defer h.running.Done()
	if !cl.expires.IsZero() {
		expiry := time.AfterFunc(time.Until(cl.expires), func() { cl.shutdown(closeSignedOut, "sign-in expired") })
		defer expiry.Stop()
	}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		cl.writeLoop()
	}()
	go cl.watch()
	cl.readLoop()
	cl.cancel()
	// Nothing reaches the socket any more: it leaves its channels and the hub, though
	// its writer may still be finishing a write and its close frame.
	cl.chMu.Lock()
	names := cl.channels
	cl.channels = nil
	cl.chMu.Unlock()
	for _, name := range names {
		h.leave(cl, name)
	}
	h.remove(cl)
	h.metrics.clients.Dec()
	<-writerDone
	cl.mu.Lock()
	slow, until, sent := cl.closeCode == closeSlow, cl.lingerUntil, cl.closeSent
	cl.mu.Unlock()
	if slow {
		cl.linger(until, sent)
	}
}

// lingerPoll is how often a lingering socket asks the kernel whether its client has
// taken everything.
const lingerPoll = 100 * time.Millisecond

// linger holds a socket dropped for slowness until its client has taken all the kernel
// holds for it, the close frame last, and answered it; or, at the latest, until the
// linger ends: then the connection is reset, so the kernel drops what the client never
// read at once, instead of holding it and the socket for minutes while it waits for a
// window that does not open. What the client sends meanwhile is read and dropped: a
// socket closed with input unread is reset, and the reset would destroy the close
// frame before the client reads it. Without a close frame sent (the write that would
// have carried it failed) there is nothing to wait for.
func (cl *client) linger(until time.Time, closeSent bool) {
	conn := cl.conn.NetConn()
	if !closeSent {
		abort(conn)
		return
	}
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		_ = conn.SetReadDeadline(until.Add(closeGrace))
		buf := make([]byte, 4096)
		for {
			if _, err := conn.Read(buf); err != nil {
				return // the client closed its side, or the linger is over
			}
		}
	}()
	defer func() {
		_ = conn.SetReadDeadline(time.Now())
		<-answered
	}()
	tick := time.NewTicker(lingerPoll)
	defer tick.Stop()
	for {
		pending, _, ok := inFlight(conn)
		if !ok {
			return // the kernel does not say: the socket closes as it is
		}
		if pending == 0 {
			select { // taken, close frame and all: a moment for the client's answer
			case <-answered:
			case <-time.After(closeGrace):
			case <-cl.hub.closing:
			}
			return
		}
		if !time.Now().Before(until) {
			abort(conn)
			return
		}
		select {
		case <-tick.C:
		case <-cl.hub.closing:
			abort(conn)
			return
		}
	}
}

type clientFrame struct {
	Type           string `json:"type"`
	ConversationID int64  `json:"conversation_id"`
	Since          *int64 `json:"since"`
}

func (cl *client) readLoop() {
	conn, cfg := cl.conn, cl.hub.cfg
	conn.SetReadLimit(cfg.ReadLimit)
	_ = cl.extendRead()
	conn.SetPongHandler(func(string) error { return cl.extendRead() })
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() && cl.ctx.Err() == nil {
				// Nothing for PongWait, not even the answer to a ping: the client
				// stopped reading.
				cl.mu.Lock()
				cl.tooSlowLocked()
				cl.mu.Unlock()
			}
			return
		}
		if cl.ctx.Err() != nil {
			continue // closing: only the client's close is awaited
		}
		_ = cl.extendRead()
		var f clientFrame
		if err := json.Unmarshal(data, &f); err != nil {
			cl.errorFrame(0, sandchat.Errorf(sandchat.EINVALID, "Frames are JSON objects with a type."))
			continue
		}
		switch f.Type {
		case "ping":
			cl.frame("pong", 0, struct{}{})
		case "subscribe":
			cl.subscribe(f)
		case "unsubscribe":
			if cl.dropChannel(f.ConversationID) {
				cl.enqueue(outItem{op: opUnsubscribe, conv: f.ConversationID})
			}
		default:
			cl.errorFrame(0, sandchat.Errorf(sandchat.EINVALID, "Unknown frame type %q (subscribe, unsubscribe, ping).", f.Type))
		}
	}
}

// dropChannel leaves a conversation's channel if this socket joined it.
func (cl *client) dropChannel(conv int64) bool {
	name := cl.hub.bus.ConversationChannel(conv)
	cl.chMu.Lock()
	i := slices.Index(cl.channels, name)
	if i >= 0 {
		cl.channels = slices.Delete(cl.channels, i, i+1)
	}
	cl.chMu.Unlock()
	if i < 0 {
		return false
	}
	cl.hub.leave(cl, name)
	return true
}

func (cl *client) hasChannel(name string) bool {
	cl.chMu.Lock()
	defer cl.chMu.Unlock()
	return slices.Contains(cl.channels, name)
}

func (cl *client) subscribe(f clientFrame) {
	name := cl.hub.bus.ConversationChannel(f.ConversationID)
	if cl.hasChannel(name) {
		cl.enqueue(outItem{op: opSubscribe, conv: f.ConversationID, since: f.Since})
		return
	}
	cl.chMu.Lock()
	n := len(cl.channels)
	cl.chMu.Unlock()
	if n > cl.hub.cfg.MaxSubscriptions {
		cl.errorFrame(f.ConversationID, sandchat.Errorf(sandchat.EINVALID, "At most %d subscriptions per socket.", cl.hub.cfg.MaxSubscriptions))
		return
	}
	// A subscription opens a conversation's history: only to a credential that still works.
	if !cl.recheck() {
		return
	}
	ctx, cancel := context.WithTimeout(cl.ctx, 10*time.Second)
	defer cancel()
	if _, err := cl.hub.events.FindConversationByID(ctx, f.ConversationID); err != nil {
		cl.errorFrame(f.ConversationID, err)
		return
	}
	if err := cl.hub.join(ctx, cl, name, f.ConversationID); err != nil {
		cl.errorFrame(f.ConversationID, sandchat.Unavailable(sandchat.DepRedis, err))
		return
	}
	cl.chMu.Lock()
	cl.channels = append(cl.channels, name)
	cl.chMu.Unlock()
	cl.enqueue(outItem{op: opSubscribe, conv: f.ConversationID, since: f.Since})
}

// progressCheck is how often the writer asks the kernel whether the client is taking
// what was written to it.
const progressCheck = time.Second

// progress watches a socket's writes being taken: a client whose kernel has room left
// acknowledges what the server writes though its application stopped reading, so
// neither the queue bound nor a write's deadline may ever trip; but once its buffer is
// full, what the server wrote waits unacknowledged, and no byte of it moving for the
// write timeout is a stalled reader. Only the watch touches it.
type progress struct {
	acked uint64
	since time.Time // when the acknowledged count last moved, or nothing was waiting
}

// stalled reports whether conn has had bytes waiting, none of them acknowledged, for
// at least limit.
func (p *progress) stalled(conn net.Conn, now time.Time, limit time.Duration) bool {
	pending, acked, ok := inFlight(conn)
	if !ok || pending == 0 || acked != p.acked || p.since.IsZero() {
		p.acked, p.since = acked, now
		return false
	}
	return now.Sub(p.since) >= limit
}

// watch drops, as too slow, a socket whose client has not taken any of what was
// written to it for the write timeout, or has left one write blocked that long. It runs
// beside the writer, which may be the one blocked. Every CredentialCheck it checks
// that the socket's credential still works.
func (cl *client) watch() {
	limit := cl.hub.cfg.WriteTimeout
	check := time.NewTicker(progressCheck)
	defer check.Stop()
	signedIn := time.NewTicker(cl.hub.cfg.CredentialCheck)
	defer signedIn.Stop()
	var taken progress
	for {
		select {
		case <-cl.ctx.Done():
			return
		case <-signedIn.C:
			if !cl.recheck() {
				return
			}
		case now := <-check.C:
			stalled := taken.stalled(cl.conn.NetConn(), now, limit)
			cl.mu.Lock()
			if stalled || !cl.writing.IsZero() && now.Sub(cl.writing) >= limit {
				cl.tooSlowLocked()
			}
			cl.mu.Unlock()
		}
	}
}

// beginWrite marks a write in progress for the watch, or refuses it once the socket is
// closing: the close frame goes next, nothing else. The deadline it returns is a
// backstop only: the watch drops a client that leaves the write blocked and moves the
// deadline to the end of the linger, within which a client that reads again gets the
// whole frame.
func (cl *client) beginWrite() (time.Time, error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if err := cl.ctx.Err(); err != nil {
		return time.Time{}, err
	}
	cl.writing = time.Now()
	return cl.writing.Add(cl.hub.cfg.WriteTimeout + cl.hub.cfg.SlowLinger), nil
}

func (cl *client) endWrite() {
	cl.mu.Lock()
	cl.writing = time.Time{}
	cl.mu.Unlock()
}

func (cl *client) writeLoop() {
	cfg := cl.hub.cfg
	ping := time.NewTicker(cfg.PingInterval)
	defer ping.Stop()
	for {
		select {
		case <-cl.ctx.Done():
			cl.mu.Lock()
			code, msg, until := cl.closeCode, cl.closeMsg, cl.lingerUntil
			cl.mu.Unlock()
			if code == 0 {
				code, msg = websocket.CloseNormalClosure, ""
			}
			if code == closeSlow {
				// Behind what the client has not read yet, within the linger.
				err := cl.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, msg), until)
				cl.mu.Lock()
				cl.closeSent = err == nil
				_ = cl.conn.NetConn().SetReadDeadline(time.Now())
				cl.mu.Unlock()
				return
			}
			err := cl.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, msg), time.Now().Add(time.Second))
			// fasthttp ignores Close on a hijacked connection (its wrapper's Close is a
			// no-op too): a read deadline ends the reader, however often the client
			// pings, and fasthttp closes the socket when the handler returns. After a
			// close frame went out the reader gets a moment for the client's answer:
			// a socket closed with unread input is reset, and the reset would destroy
			// the close frame before the client reads it.
			deadline := time.Now()
			if err == nil {
				deadline = deadline.Add(closeGrace)
			}
			cl.mu.Lock()
			_ = cl.conn.NetConn().SetReadDeadline(deadline)
			cl.mu.Unlock()
			return
		case <-ping.C:
			deadline, err := cl.beginWrite()
			if err == nil {
				err = cl.conn.WriteControl(websocket.PingMessage, nil, deadline)
				cl.endWrite()
			}
			if err != nil {
				cl.writeFailed(err)
			}
		case <-cl.wake:
			cl.mu.Lock()
			items := cl.queue
			cl.queue, cl.queued = nil, 0
			cl.mu.Unlock()
			for _, it := range items {
				if cl.ctx.Err() != nil {
					break
				}
				if err := cl.handle(it); err != nil {
					cl.writeFailed(err)
					break
				}
			}
		}
	}
}

func (cl *client) write(payload []byte) error {
	deadline, err := cl.beginWrite()
	if err != nil {
		return err
	}
	_ = cl.conn.SetWriteDeadline(deadline)
	err = cl.conn.WriteMessage(websocket.TextMessage, payload)
	cl.endWrite()
	if err != nil {
		return err
	}
	cl.wrote()
	return nil
}

// handle writes one item. Conversation events pass only while the conversation is
// active and only in seq order: a seq already written is dropped (it came twice, by
// replay and live), a seq past the next one makes the writer fetch the gap first.
func (cl *client) handle(it outItem) error {
	switch it.op {
	case opFrame:
		return cl.write(it.payload)
	case opEvent:
		if it.conv == 0 {
			return cl.write(it.payload)
		}
		st := cl.convs[it.conv]
		if st == nil || !st.active || it.seq <= st.last {
			return nil
		}
		if it.seq > st.last+1 {
			if err := cl.replay(it.conv, st, false); err != nil || it.seq <= st.last {
				return err
			}
		}
		st.last = it.seq
		return cl.write(it.payload)
	case opSubscribe:
		st := &convState{active: true}
		cl.convs[it.conv] = st
		if it.since == nil {
			// Live only: start after the newest event there is now.
			last, err := cl.hub.events.LastSeq(cl.ctx, it.conv)
			if err != nil {
				cl.errorFrame(it.conv, err)
				return nil
			}
			st.last = last
			return cl.subscribed(it.conv, true)
		}
		st.last = *it.since
		return cl.replay(it.conv, st, true)
	case opUnsubscribe:
		delete(cl.convs, it.conv)
	case opRevoke:
		// The user lost access: stop delivering at once and leave the channel.
		_, delivering := cl.convs[it.conv]
		joined := cl.dropChannel(it.conv)
		if !delivering && !joined {
			return nil
		}
		delete(cl.convs, it.conv)
		cl.errorFrame(it.conv, sandchat.Errorf(sandchat.ENOTFOUND, "You no longer have access to this conversation; it was unsubscribed."))
	case opResync:
		if it.conv == 0 {
			// The user's channel was subscribed again after Redis came back: a
			// revocation sent meanwhile was lost.
			cl.recheck()
			return nil
		}
		if st := cl.convs[it.conv]; st != nil && st.active {
			return cl.replay(it.conv, st, false)
		}
	}
	return nil
}

func (cl *client) subscribed(conv int64, recovered bool) error {
	raw, _ := json.Marshal(map[string]bool{"recovered": recovered})
	payload, _ := json.Marshal(conversations.Event{Type: "subscribed", ConversationID: conv, Data: raw})
	return cl.write(payload)
}

// replay writes every stored event after st.last. With announce (the answer to a
// subscribe) it first says "subscribed" with recovered true; when the events were pruned
// it says recovered false, and the client refetches over REST and continues live from
// the newest seq.
func (cl *client) replay(conv int64, st *convState, announce bool) error {
	for {
		evs, recovered, err := cl.hub.events.EventsSince(cl.ctx, conv, st.last, cl.hub.cfg.ReplayPage)
		if err != nil {
			if c := sandchat.ErrorCode(err); c == sandchat.ENOTFOUND || c == sandchat.EFORBIDDEN {
				st.active = false // access is gone: live events must stop too
			}
			cl.errorFrame(conv, err)
			return nil
		}
		if !recovered {
			if st.last, err = cl.hub.events.LastSeq(cl.ctx, conv); err != nil {
				cl.errorFrame(conv, err)
				return nil
			}
			return cl.subscribed(conv, false)
		}
		if announce {
			if err := cl.subscribed(conv, true); err != nil {
				return err
			}
			announce = false
		}
		if err := cl.writeEvents(st, evs); err != nil {
			return err
		}
		if len(evs) < cl.hub.cfg.ReplayPage {
			return nil
		}
	}
}

func (cl *client) writeEvents(st *convState, evs []conversations.Event) error {
	for _, ev := range evs {
		payload, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		if err := cl.write(payload); err != nil {
			return err
		}
		st.last = ev.Seq
	}
	return nil
}
