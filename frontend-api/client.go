package frontendapi

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/sandchat/sandchat"
)

// parseProxies reads the trusted proxies: addresses and CIDR ranges.
func parseProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, raw := range list {
		raw = strings.TrimSpace(raw)
		if p, err := netip.ParsePrefix(raw); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(raw)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q is not an IP address or a CIDR range", raw)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

func (s *Server) trustedProxy(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientIP is the address of whoever sent the request, for what is counted per client.
// Without trusted proxies it is the peer's. From a trusted proxy it is the last address
// the proxies did not add for one another: each proxy appends to X-Forwarded-For the
// address it was reached from, so the entries from the right are the chain back to the
// client, and anything left of the first address that is not a trusted proxy's was
// written by the client itself, which may write anything (Fiber's c.IP() takes the
// first entry, which is the client's to choose). An entry that is no address ends the
// walk: what the proxy that wrote it saw cannot be told, so the request counts against
// that proxy. The answer is what the client is counted as (clientKey).
func (s *Server) clientIP(c *fiber.Ctx) string {
	peer, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	peer = peer.Unmap()
	if len(s.proxies) == 0 || !s.trustedProxy(peer) {
		return clientKey(peer)
	}
	last := peer
	// Every field of the header, in order, makes one list.
	var entries []string
	for _, f := range c.Request().Header.PeekAll(s.cfg.ProxyHeader) {
		entries = append(entries, strings.Split(string(f), ",")...)
	}
	for i := len(entries) - 1; i >= 0; i-- {
		a, ok := forwardedAddr(entries[i])
		if !ok {
			return clientKey(last)
		}
		if !s.trustedProxy(a) {
			return clientKey(a)
		}
		last = a
	}
	return clientKey(last)
}

// clientKey is what a client's address counts as: an IPv4 address itself, an IPv6
// address its /64. One home or one server is given a /64 (or more) whole, and picks
// any of its 2^64 addresses at will: counted one by one, each would be a new client.
func clientKey(a netip.Addr) string {
	if a.Is6() {
		p, _ := a.WithZone("").Prefix(64)
		return p.String()
	}
	return a.String()
}

// forwardedAddr reads one entry of a forwarding header: an address, with or without a
// port ("203.0.113.7", "203.0.113.7:5120", "[2001:db8::1]:443"), an IPv6 address in
// brackets or not ("[2001:db8::1]").
func forwardedAddr(entry string) (netip.Addr, bool) {
	entry = strings.TrimSpace(entry)
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(entry, "["), "]")); err == nil {
		return a.Unmap(), true
	}
	if host, _, err := net.SplitHostPort(entry); err == nil {
		if a, err := netip.ParseAddr(host); err == nil {
			return a.Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// setRateLimitHeaders tells the client where the tightest rate limit its request was
// counted against stands, in the headers of the IETF draft (RateLimit-Limit,
// -Remaining, -Reset in seconds, and the policy: the limit per window); a refusal also
// carries Retry-After (errorHandler).
func setRateLimitHeaders(c *fiber.Ctx, report *sandchat.RateReport) {
	rl, ok := report.Tightest()
	if !ok {
		return
	}
	c.Set("RateLimit-Limit", strconv.Itoa(rl.Limit))
	c.Set("RateLimit-Remaining", strconv.Itoa(rl.Remaining))
	c.Set("RateLimit-Reset", strconv.Itoa(int((rl.Reset+time.Second-1)/time.Second)))
	c.Set("RateLimit-Policy", fmt.Sprintf("%d;w=%d", rl.Limit, int(rl.Window/time.Second)))
}
