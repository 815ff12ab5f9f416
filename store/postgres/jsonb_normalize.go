package postgres

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// normalizeJSONB returns v as Postgres's jsonb gives it back, compacted:
// object keys in jsonb's order (shorter first, then by bytes), the last of
// a repeated key, strings escaped as jsonb escapes them. It returns false
// for values whose text it cannot be sure of (a number not in the form
// Postgres's numeric writes back as it is, a string jsonb refuses):
// callers then keep v's own bytes.
func normalizeJSONB(v []byte) ([]byte, bool) {
	if len(v) == 0 || !surrogatesPaired(v) {
		return nil, false
	}
	d := json.NewDecoder(bytes.NewReader(v))
	d.UseNumber()
	var x any
	if err := d.Decode(&x); err != nil || d.More() {
		return nil, false
	}
	return appendJSONB(nil, x)
}

// appendJSONB appends x (decoded with UseNumber) as jsonb writes it, or
// returns false as normalizeJSONB.
func appendJSONB(buf []byte, x any) ([]byte, bool) {
	switch x := x.(type) {
	case nil:
		return append(buf, "null"...), true
	case bool:
		return strconv.AppendBool(buf, x), true
	case json.Number:
		if !numericKeepsText(string(x)) {
			return nil, false
		}
		return append(buf, x...), true
	case string:
		return appendJSONBString(buf, x)
	case []any:
		buf = append(buf, '[')
		for i, e := range x {
			if i > 0 {
				buf = append(buf, ',')
			}
			var ok bool
			if buf, ok = appendJSONB(buf, e); !ok {
				return nil, false
			}
		}
		return append(buf, ']'), true
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int {
			if len(a) != len(b) {
				return len(a) - len(b)
			}
			return strings.Compare(a, b)
		})
		buf = append(buf, '{')
		for i, k := range keys {
			if i > 0 {
				buf = append(buf, ',')
			}
			var ok bool
			if buf, ok = appendJSONBString(buf, k); !ok {
				return nil, false
			}
			if buf, ok = appendJSONB(append(buf, ':'), x[k]); !ok {
				return nil, false
			}
		}
		return append(buf, '}'), true
	}
	return nil, false
}

// surrogatesPaired reports whether every \u escape of a UTF-16 surrogate
// in the JSON text v is a high one followed by a low one: jsonb refuses a
// lone surrogate, where encoding/json reads it as U+FFFD.
func surrogatesPaired(v []byte) bool {
	surrogate := func(i int) (rune, bool) { // the escape at v[i:] (a backslash, u, four hex digits)
		if i+6 > len(v) || v[i] != '\\' || v[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(v[i+2:i+6]), 16, 16)
		return rune(n), err == nil && n >= 0xd800 && n <= 0xdfff
	}
	for i := 0; i < len(v); i++ {
		if v[i] != '\\' {
			continue
		}
		r, ok := surrogate(i)
		switch {
		case !ok:
			i++ // an escape of one character (or of no surrogate): skip it
		case r >= 0xdc00:
			return false // a low surrogate first
		default:
			if low, ok := surrogate(i + 6); !ok || low < 0xdc00 {
				return false
			}
			i += 11
		}
	}
	return true
}

// numericKeepsText reports whether Postgres's numeric writes n back as it
// is: -?(0|[1-9][0-9]*)(.[0-9]+)?, and not a negative zero.
func numericKeepsText(n string) bool {
	s := strings.TrimPrefix(n, "-")
	intPart, frac, hasFrac := strings.Cut(s, ".")
	if intPart == "" || (len(intPart) > 1 && intPart[0] == '0') || (hasFrac && frac == "") {
		return false
	}
	for _, part := range []string{intPart, frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return false
			}
		}
	}
	if s != n && strings.Trim(intPart+frac, "0") == "" {
		return false // -0, -0.0: numeric drops the sign
	}
	return true
}

// appendJSONBString appends s as jsonb writes a string (escape_json):
// \" \\ \b \f \n \r \t, other control characters as \u00xx, the rest as it
// is. jsonb refuses \u0000 and invalid UTF-8: false.
func appendJSONBString(buf []byte, s string) ([]byte, bool) {
	if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
		return nil, false
	}
	buf = append(buf, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			buf = append(buf, `\"`...)
		case '\\':
			buf = append(buf, `\\`...)
		case '\b':
			buf = append(buf, `\b`...)
		case '\f':
			buf = append(buf, `\f`...)
		case '\n':
			buf = append(buf, `\n`...)
		case '\r':
			buf = append(buf, `\r`...)
		case '\t':
			buf = append(buf, `\t`...)
		default:
			if c < 0x20 {
				buf = fmt.Appendf(buf, `\u%04x`, c)
			} else {
				buf = append(buf, c)
			}
		}
	}
	return append(buf, '"'), true
}
