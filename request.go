package sandchat

import "context"

type requestIDKey struct{}

// WithRequestID returns ctx carrying the id of the request it serves (X-Request-Id),
// which every log line written with ctx names; a turn started by the request keeps it.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the id of the request ctx serves, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
