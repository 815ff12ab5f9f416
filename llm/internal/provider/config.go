package provider

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultResponseHeaderTimeout bounds the wait for the response headers
// with the adapters' default HTTP client; the adapters export it as their
// own.
const DefaultResponseHeaderTimeout = 10 * time.Minute

// NewHTTPClient returns a client built on a clone of
// http.DefaultTransport that waits at most responseHeaderTimeout for
// response headers, and without an overall timeout, so that long streams
// are not cut (a call is bounded by its context).
func NewHTTPClient(responseHeaderTimeout time.Duration) *http.Client {
	t, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return &http.Client{Transport: http.DefaultTransport}
	}
	t = t.Clone()
	t.ResponseHeaderTimeout = responseHeaderTimeout
	return &http.Client{Transport: t}
}

// ParseBaseURL parses the Config.BaseURL of adapter name, which must be an
// absolute http(s) URL; example is a valid one, shown in the error.
func ParseBaseURL(name, baseURL, example string) (*url.URL, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s: Config.BaseURL must be an http(s) URL like %q, got %q", name, example, baseURL)
	}
	return u, nil
}

// ValidateHeaders reports the first of the Config.Headers of adapter name
// that cannot be sent: a name that is not an HTTP token, or a value with a
// CR or LF (which would inject headers).
func ValidateHeaders(name string, headers map[string]string) error {
	for k, v := range headers {
		if !validHeaderName(k) || strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("%s: Config.Headers: invalid header %q", name, k)
		}
	}
	return nil
}

// validHeaderName reports whether name is an HTTP token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return true
}
