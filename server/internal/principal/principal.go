// Package principal carries the caller package server authenticated to the
// handlers it mounts (Config.Chat), so that server/aisdk can take the
// server's principal, including the server's unauthenticated mode, without
// importing package server.
package principal

import "context"

type key struct{}

type value struct {
	id string
	// unauthenticated: the server runs without Authenticate
	// (AllowUnauthenticated), so every caller is "".
	unauthenticated bool
}

// With returns ctx carrying the principal id. unauthenticated says that
// the server authenticates nobody (id is then "").
func With(ctx context.Context, id string, unauthenticated bool) context.Context {
	return context.WithValue(ctx, key{}, value{id: id, unauthenticated: unauthenticated})
}

// From returns the principal of a request the server authenticated. ok is
// false when the request did not pass through the server's
// authentication.
func From(ctx context.Context) (id string, unauthenticated, ok bool) {
	v, ok := ctx.Value(key{}).(value)
	return v.id, v.unauthenticated, ok
}
