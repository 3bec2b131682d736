package sandchat

import (
	"context"
	"crypto/sha256"
	"time"
)

// A ticket signs in one request that cannot carry a header: a WebSocket upgrade, or a
// download opened as a plain link. A client signed in by a token or a session asks for
// one (POST /api/v1/tickets) and puts it in the URL instead of its token, which proxies
// and browsers keep in logs and histories: a ticket works once, for seconds, for the one
// use it was made for, and only while what made it still signs its holder in.

// Uses a ticket is made for.
const (
	TicketWebSocket = "websocket"
	TicketDownload  = "download"
)

// TicketTTL is how long a ticket works: long enough for the request it was made for to
// follow it, short enough that a copy found in a log is spent.
const TicketTTL = 30 * time.Second

// Ticket is what a ticket stands for.
type Ticket struct {
	UserID int64  `json:"user_id"`
	Use    string `json:"use"`
	// FileID is the one file a download ticket opens.
	FileID int64 `json:"file_id,omitempty"`
	// Via is the credential that made the ticket: the ticket works only while it
	// still signs the user in, checked again when the ticket is used.
	Via Credential `json:"via"`
}

// Credential kinds.
const (
	CredentialToken   = "token"
	CredentialSession = "session"
)

// Credential names how a request was signed in, without the secret: its kind and the
// hash the store keeps of it (SecretHash). The check that accepts it also says which
// token or session it is and when it stops working (zero: never): a socket it opens is
// closed when it is revoked or expires. A ticket keeps the kind and hash only; its use
// checks them again.
type Credential struct {
	Kind      string    `json:"kind"`
	Hash      []byte    `json:"hash"`
	ID        int64     `json:"-"`
	ExpiresAt time.Time `json:"-"`
}

// SecretHash is how the stores keep a secret (a token, a link, a session's cookie):
// its sha256, so a leaked table or key signs no one in.
func SecretHash(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// TicketService keeps tickets (only their hashes) until they are used or expire.
type TicketService interface {
	// IssueTicket stores t and returns the ticket's secret, working once until
	// expiresAt.
	IssueTicket(ctx context.Context, t Ticket, ttl time.Duration) (secret string, expiresAt time.Time, err error)
	// RedeemTicket spends a ticket and returns what it stands for; a ticket that is
	// unknown, spent or expired is one EUNAUTHORIZED, whichever it was.
	RedeemTicket(ctx context.Context, secret string) (*Ticket, error)
}
