package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/helix-agents/helix-dbos/server/internal/pgtext"
)

// decodeBody reads the request's JSON body into v (a pointer to a struct
// with json tags): Content-Type application/json, at most maxBytes, one
// JSON object, no unknown fields, no trailing data. The errors it returns
// are written for the client.
func decodeBody(r *http.Request, w http.ResponseWriter, maxBytes int64, v any) *apiError {
	if r.ContentLength != 0 { // a body, or one of unknown length
		if err := requireJSON(r); err != nil {
			return err
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return newError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge,
			"the request body exceeds the limit of %d bytes: send less (for example fewer or shorter messages)", tooLarge.Limit)
	case err != nil:
		return newError(http.StatusBadRequest, CodeInvalidJSON, "the request body could not be read: send it again")
	case len(bytes.TrimSpace(body)) == 0:
		return newError(http.StatusBadRequest, CodeInvalidJSON, "the request body is empty: send a JSON object")
	case pgtext.JSONHasNUL(body):
		return newError(http.StatusBadRequest, CodeInvalidRequest,
			`the request body has a string with the character U+0000 ("\u0000"), which cannot be stored: remove it`)
	}
	// Unknown top-level fields first, with the list of the known ones: the
	// most common mistake (a typo, a field of another route) gets the most
	// helpful answer.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return jsonError(err)
	}
	known := jsonFields(v)
	var unknown []string
	for name := range fields {
		if !slices.Contains(known, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return &apiError{Status: http.StatusBadRequest, Code: CodeUnknownField,
			Message: fmt.Sprintf("unknown field(s) %s: this route accepts %s", quoteList(unknown), quoteList(known)),
			Details: map[string]any{"unknownFields": unknown, "knownFields": known}}
	}
	// (json.Unmarshal above also refused data after the object.)
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	return nil
}

// requireJSON refuses a body that is not declared application/json
// (parameters such as charset allowed). Besides telling clients what the
// routes read, it is the server's defence against cross-site requests: a
// browser sends a cross-origin POST without asking the server first (a
// CORS preflight) only with the content types of HTML forms
// (application/x-www-form-urlencoded, multipart/form-data, text/plain) or
// none, so a page on another origin cannot make a visitor's browser post
// to these routes with the visitor's cookies.
func requireJSON(r *http.Request) *apiError {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
			"the request has a body but no Content-Type: send it with Content-Type application/json")
	}
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return newError(http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
			"Content-Type %q is not supported: send a JSON body with Content-Type application/json", ct)
	}
	return nil
}

// jsonError describes a decoding error without naming Go types.
func jsonError(err error) *apiError {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syntax):
		return newError(http.StatusBadRequest, CodeInvalidJSON, "the request body is not valid JSON (at byte %d): %s", syntax.Offset, syntax.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return newError(http.StatusBadRequest, CodeInvalidJSON, "the request body must be a JSON object, got a JSON %s", typ.Value)
		}
		return newError(http.StatusBadRequest, CodeInvalidRequest, "field %q must be %s, got a JSON %s", typ.Field, jsonKind(typ.Type), typ.Value)
	}
	// encoding/json's other errors (an unknown nested field) describe the
	// client's document, not the server: safe to pass on.
	return newError(http.StatusBadRequest, CodeInvalidRequest, "the request body does not match the route's shape: %s",
		strings.TrimPrefix(err.Error(), "json: "))
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "a different JSON type"
}

// jsonFields lists the JSON names of the fields of the struct v points to.
func jsonFields(v any) []string {
	var names []string
	for f := range reflect.TypeOf(v).Elem().Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// Limits of identifiers in requests.
const (
	maxSessionIDLength = 200
	maxReasonLength    = 2000
)

// validSessionID checks a session ID a client chooses for a new session:
// it becomes part of DBOS workflow IDs, so it is restricted to a safe
// alphabet.
func validSessionID(id string) error {
	if id == "" || len(id) > maxSessionIDLength {
		return fmt.Errorf("sessionId must have 1 to %d characters, got %d", maxSessionIDLength, len(id))
	}
	for _, c := range id {
		if !sessionIDChar(c) {
			return fmt.Errorf("sessionId %q has the character %q: use letters, digits, '-', '_', '.' and ':'", id, c)
		}
	}
	return nil
}

func sessionIDChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':'
}

// requireSessionID checks the sessionId naming an existing session. Any
// session's ID is valid UTF-8 without control characters (the server's
// own alphabet is narrower, but sessions created by the chat routes or the
// engine, and sub-agents', have more): an ID with others names no session,
// and is answered as one that does not exist instead of reaching the
// database (which refuses NUL and invalid UTF-8 with an error).
func requireSessionID(id string) *apiError {
	if id == "" {
		return newError(http.StatusBadRequest, CodeInvalidRequest, "sessionId is required: give the ID returned by POST /start")
	}
	if len(id) > maxSessionIDLength {
		return newError(http.StatusBadRequest, CodeInvalidRequest, "sessionId is too long (%d characters, at most %d)", len(id), maxSessionIDLength)
	}
	if !utf8.ValidString(id) || strings.IndexFunc(id, unicode.IsControl) >= 0 {
		return sessionNotFound(id)
	}
	return nil
}

// checkReason bounds a free-text reason.
func checkReason(reason string) *apiError {
	if len(reason) > maxReasonLength {
		return newError(http.StatusBadRequest, CodeInvalidRequest, "reason is too long (%d bytes, at most %d)", len(reason), maxReasonLength)
	}
	return nil
}
